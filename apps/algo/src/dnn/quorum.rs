//! The epoch quorum of Project Adam: an epoch ends once a fraction of the model replicas
//! have finished their share of it, and a straggler's unprocessed samples come first in
//! its next epoch. This module holds the arithmetic (how many replicas make the quorum,
//! and the next epoch's sample order); the replicas' messages are the app's
//! (`iterstore_apps::dnn`).

/// Replicas out of `replicas` whose finished shares end an epoch at quorum `fraction`
/// (`0 < fraction ≤ 1`): `⌈fraction · replicas⌉`, at least one. With 4 replicas, 0.75
/// needs 3 and 0.5 needs 2.
pub fn replicas_needed(fraction: f32, replicas: usize) -> usize {
    // A fraction that is k / replicas in decimal (0.75 of 4) must not round up to k + 1
    // through f32's representation: a small tolerance below the ceiling.
    let exact = f64::from(fraction) * replicas as f64;
    let needed = (exact - 1e-6).ceil().max(0.0) as usize;
    needed.clamp(1, replicas.max(1))
}

/// Puts `carried` (the samples a straggler did not reach last epoch, in the order they
/// were due) first in `order` (this epoch's order of the same samples), the others
/// following in their order. `order` keeps exactly its samples: a carried sample that
/// is not in it, or is carried twice, is skipped.
pub fn carry_over(order: &mut Vec<u32>, carried: &[u32]) {
    if carried.is_empty() {
        return;
    }
    let mut members = order.clone();
    members.sort_unstable();
    // Which of `order`'s samples are carried (by their index in `members`).
    let mut taken = vec![false; members.len()];
    let mut first = Vec::with_capacity(carried.len());
    for &i in carried {
        if let Ok(k) = members.binary_search(&i) {
            if !taken[k] {
                taken[k] = true;
                first.push(i);
            }
        }
    }
    let is_taken = |i: &u32| members.binary_search(i).is_ok_and(|k| taken[k]);
    let rest: Vec<u32> = order.iter().copied().filter(|i| !is_taken(i)).collect();
    order.clear();
    order.extend(first);
    order.extend(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quorum_is_the_ceiling_of_the_fraction_and_at_least_one() {
        assert_eq!(replicas_needed(0.75, 4), 3);
        assert_eq!(replicas_needed(0.5, 4), 2);
        assert_eq!(replicas_needed(0.6, 4), 3);
        assert_eq!(replicas_needed(1.0, 4), 4);
        assert_eq!(replicas_needed(0.01, 4), 1);
        assert_eq!(replicas_needed(0.7, 10), 7);
        assert_eq!(replicas_needed(0.75, 1), 1);
    }

    #[test]
    fn carried_samples_come_first_and_every_sample_stays_once() {
        let mut order = vec![5, 3, 9, 1, 7, 2];
        carry_over(&mut order, &[7, 1, 7, 42]);
        assert_eq!(order, vec![7, 1, 5, 3, 9, 2]);
        let mut same = vec![4, 2, 6];
        carry_over(&mut same, &[]);
        assert_eq!(same, vec![4, 2, 6]);
    }
}
