//! The process arena's tests: fresh reads, whole and partial refreshes, zone copies.

use super::words::{scatter, store, zeroed_words};
use super::*;
use crate::element::ElemType;
use crate::gather::{Access, AccessLog, AccessPattern};
use crate::plan::{build, PlanConfig};
use crate::table::TableMeta;

#[test]
fn zeroed_words_are_zero_of_any_length() {
    assert!(zeroed_words(0).is_empty());
    let w = zeroed_words(1000);
    assert_eq!(w.len(), 1000);
    assert!(w.iter().all(|x| x.load(Ordering::Relaxed) == 0));
    w[999].store(7, Ordering::Relaxed);
    assert_eq!(w[999].load(Ordering::Relaxed), 7);
}

fn arena() -> ProcessArena {
    let mut log = AccessLog::default();
    for r in 0..10 {
        log.record(RowKey::new(0, r), Access::Read);
    }
    let tables = [TableMeta {
        id: 0,
        name: "t".into(),
        width: 3,
        elem: ElemType::I32,
        rows: None,
        rule: crate::rule::Rule::Sum,
    }];
    let cfg = PlanConfig {
        workers: 1,
        chunks: 2,
        thread_caches: false,
        contention_threshold: 1.0,
    };
    ProcessArena::new(
        build(
            &AccessPattern::from_logs(vec![log]),
            &tables,
            &crate::placement::Placement::hashed(1),
            &cfg,
        ),
        1,
        true,
        None,
    )
}

#[test]
fn reads_only_fresh_chunks_and_keeps_newer_snapshots() {
    let a = arena();
    let slot = a.slot(RowKey::new(0, 7)).unwrap();
    let mut dst = [0u8; 12];
    assert_eq!(a.read_fresh(slot, 0, &mut dst), None, "never refreshed");
    let chunk = &a.plan.chunks[1];
    let mut bytes = vec![0u8; chunk.bytes.len()];
    let at = a.plan.slots[slot as usize].offset - chunk.bytes.start;
    bytes[at..at + 12].copy_from_slice(bytemuck::cast_slice(&[1i32, 2, 3]));
    a.write_chunk(0, 1, 4, None, &bytes).unwrap();
    assert_eq!(a.read_fresh(slot, 4, &mut dst), Some(4));
    assert_eq!(bytemuck::cast_slice::<u8, i32>(&dst), &[1, 2, 3]);
    assert_eq!(a.read_fresh(slot, 5, &mut dst), None, "stale for clock 5");
    a.write_chunk(0, 1, 3, None, &vec![0u8; chunk.bytes.len()])
        .unwrap();
    assert_eq!(
        a.read_fresh(slot, 4, &mut dst),
        Some(4),
        "older snapshot ignored"
    );
    assert!(a.write_chunk(0, 1, 5, None, &[0u8; 3]).is_err());
    assert!(a.write_chunk(0, 9, 5, None, &bytes).is_err());
}

#[test]
fn a_partial_refresh_writes_only_its_rows_and_needs_the_chunk_first() {
    let a = arena();
    let slot = a.slot(RowKey::new(0, 7)).unwrap();
    let chunk = &a.plan.chunks[1];
    let pos = slot - chunk.slots.start as u32;
    let row = bytemuck::cast_slice::<i32, u8>(&[4, 5, 6, 0]).to_vec(); // padded to 16
    let err = a.write_chunk(0, 1, 2, Some(&[pos]), &row).unwrap_err();
    assert!(err.to_string().contains("holds it at none"), "{err}");
    let mut whole = vec![0u8; chunk.bytes.len()];
    whole[..4].copy_from_slice(&9i32.to_le_bytes());
    a.write_chunk(0, 1, 1, None, &whole).unwrap();
    a.write_chunk(0, 1, 2, Some(&[pos]), &row).unwrap();
    let mut dst = [0u8; 12];
    assert_eq!(a.read_fresh(slot, 2, &mut dst), Some(2));
    assert_eq!(bytemuck::cast_slice::<u8, i32>(&dst), &[4, 5, 6]);
    // The chunk's other rows kept their values.
    let first = chunk.slots.start as u32;
    if first != slot {
        let mut other = [0u8; 12];
        a.read_fresh(first, 2, &mut other).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&other)[0], 9);
    }
    assert!(
        a.write_chunk(0, 1, 1, Some(&[pos]), &row).is_err(),
        "older than held"
    );
    assert!(
        a.write_chunk(0, 1, 3, Some(&[999]), &row).is_err(),
        "no such row"
    );
    assert!(
        a.write_chunk(0, 1, 3, Some(&[pos]), &row[..8]).is_err(),
        "wrong size"
    );
}

/// The words of global chunk `c` of `a`, as its readers see them.
fn chunk_words(a: &ProcessArena, c: usize) -> Vec<u64> {
    let span = &a.plan.chunks[c].bytes;
    let words = &a.words[span.start / 8..span.end / 8];
    words.iter().map(|w| w.load(Ordering::Relaxed)).collect()
}

#[test]
fn a_refresh_written_from_slices_is_the_one_written_from_bytes() {
    let (sent, local) = (arena(), arena());
    let chunk = &sent.plan.chunks[1];
    let words: Vec<u64> = (1..=(chunk.bytes.len() / 8) as u64).collect();
    // Whole: the same words in one buffer, or in slices cut anywhere (a chunk
    // gathered from several ranges of a shard's arena).
    sent.write_chunk(0, 1, 2, None, bytemuck::cast_slice(&words))
        .unwrap();
    let (a, b) = words.split_at(3);
    let (b, c) = b.split_at(1);
    let none = |_: usize| -> &[u64] { unreachable!("a whole refresh") };
    local
        .write_chunk_from(
            (0, 1, 2),
            None,
            (words.len(), || [a, b, c].into_iter()),
            none,
        )
        .unwrap();
    assert_eq!(chunk_words(&local, 1), chunk_words(&sent, 1));
    assert_eq!(chunk_words(&local, 1), words);
    // Partial: each changed row's padded words.
    let rows = [0u32, 2];
    let row = |i: u64| [100 + i, 200 + i];
    let changed = [row(0), row(2)].concat();
    sent.write_chunk(0, 1, 3, Some(&rows), bytemuck::cast_slice(&changed))
        .unwrap();
    let (r0, r2) = (row(0), row(2));
    let changed = |k: usize| -> &[u64] { [&r0[..], &r2[..]][k] };
    let no_ranges = || std::iter::empty::<&[u64]>();
    local
        .write_chunk_from((0, 1, 3), Some(&rows), (4, no_ranges), changed)
        .unwrap();
    assert_eq!(chunk_words(&local, 1), chunk_words(&sent, 1));
    assert_ne!(chunk_words(&local, 1), words, "the rows changed");
    let mut dst = [0u8; 12];
    assert_eq!(
        local.read_fresh(chunk.slots.start as u32, 3, &mut dst),
        Some(3)
    );
    // The same checks: a wrong size or row is an error, not a write.
    assert!(local
        .write_chunk_from((0, 1, 4), Some(&rows), (3, no_ranges), changed)
        .is_err());
    assert!(local
        .write_chunk_from((0, 1, 4), Some(&[99]), (2, no_ranges), changed)
        .is_err());
    assert_eq!(
        local.read_fresh(chunk.slots.start as u32, 4, &mut dst),
        None
    );
    // Counted apart from the refreshes that arrived as messages.
    assert_eq!(local.local_refreshes.load(Ordering::Relaxed), 4);
    assert_eq!(sent.local_refreshes.load(Ordering::Relaxed), 0);
    assert_eq!(local.partial_refreshes.load(Ordering::Relaxed), 3);
}

#[test]
fn store_writes_every_word_through_conv_as_far_as_both_go() {
    for n in 0..11u64 {
        let words: Vec<AtomicU64> = (0..n + 1).map(|_| AtomicU64::new(0)).collect();
        let src: Vec<u64> = (1..=n).collect();
        store(&words, &src, |w| w * 10);
        let got: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let want: Vec<u64> = (1..=n).map(|w| w * 10).chain([0]).collect();
        assert_eq!(got, want);
    }
}

#[test]
fn scatter_fills_spans_from_slices_cut_anywhere() {
    let words: Vec<AtomicU64> = (0..10).map(|_| AtomicU64::new(0)).collect();
    let spans = [(1, 2), (5, 3), (9, 1)];
    let src: Vec<u64> = (1..=6).collect();
    scatter(
        &words,
        &spans,
        [&src[..1], &src[1..4], &[], &src[4..]],
        |w| w * 10,
    );
    let got: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
    assert_eq!(got, [0, 10, 20, 0, 0, 30, 40, 50, 0, 60]);
}

#[test]
fn a_zone_copy_is_written_with_its_chunk_and_read_by_that_zone_only() {
    let plain = arena();
    let chunks = plain.plan.chunks.len();
    let mut copies = vec![0u64; chunks];
    copies[1] = 0b10; // chunk 1 copied into zone 1
    let workers = vec![0, 1];
    let a = plain.with_zone_copies(copies, workers, None);
    assert_eq!(a.zone_copy_bytes(), a.plan.chunks[1].bytes.len());
    assert_eq!((a.worker_zone(0), a.worker_zone(1)), (0, 1));
    assert!(a.has_copy(1, 1) && !a.has_copy(1, 0) && !a.has_copy(0, 1));
    let slot = a.slot(RowKey::new(0, 7)).unwrap();
    let s = a.plan.slots[slot as usize];
    let chunk = &a.plan.chunks[1];
    let mut bytes = vec![0u8; chunk.bytes.len()];
    let at = s.offset - chunk.bytes.start;
    bytes[at..at + 12].copy_from_slice(bytemuck::cast_slice(&[7i32, 8, 9]));
    a.write_chunk(0, 1, 3, None, &bytes).unwrap();
    for zone in [0, 1] {
        let mut dst = [0u8; 12];
        let word = s.word();
        assert_eq!(a.read_at_in(zone, 1, word, 3, &mut dst), Some(3));
        assert_eq!(
            bytemuck::cast_slice::<u8, i32>(&dst),
            &[7, 8, 9],
            "zone {zone}"
        );
    }
    // Zone 1 really reads its copy: the two arrays are different memory.
    assert!(!std::ptr::eq(a.words_for(1, 1), a.words_for(1, 0)));
}

#[test]
fn an_arena_bound_to_its_chunks_nodes_reads_as_before() {
    let plain = arena();
    let binder = MemBinder::new();
    let nodes = vec![0; plain.plan.chunks.len()];
    let bound = ProcessArena::new(plain.plan.clone(), 1, true, Some((&binder, &nodes)));
    let expected = if binder.supports_area_binding() {
        bound.plan.arena_bytes
    } else {
        0
    };
    assert_eq!(bound.bound_bytes, expected);
    assert_eq!(plain.bound_bytes, 0);
    assert_eq!(bound.words.len(), plain.words.len());
    assert!(bound.words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
}
