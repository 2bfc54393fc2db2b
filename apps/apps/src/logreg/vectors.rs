//! The optimizer's vectors as aligned tables, and the server functions that combine them
//! where they live (Sandblaster's vector operations).
//!
//! A vector of `n + 1` values (the model's `n` weights and one slot for the objective's
//! loss) is kept as `⌈(n + 1)/B⌉` rows of `B` in a table of its own; every such table is
//! aligned ([`Cluster::create_table_aligned`]), so row `r` of all of them is on one shard
//! and each function runs row by row on what its shard holds
//! ([`ShardRows::home_rows`](iterstore::functions::ShardRows::home_rows)). The tables:
//! `w` (the iterate), `wt` (the line search's trial point, which the workers read), `raw`
//! (the coordinator's unscaled sum of the units' gradients and losses), `g` and `gt` (the
//! objective's gradient at `w` and at `wt`), `d` (the search direction) and `m + 1` slots
//! each of steps `s` and gradient changes `y` (the history, one spare).
//!
//! Only scalars cross the network: a call's arguments and its per-shard results, summed in
//! shard order (so P processes give one process of as many shards bit for bit).

use iterstore::functions::{Reduce, ServerFn, ShardRows};
use iterstore::{Cluster, Error, Table};
use iterstore_algo::logreg::Shape;

/// Where the values of a vector are: rows of `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    /// The model's shape.
    pub(super) shape: Shape,
    /// Values per row.
    pub(super) block: usize,
}

impl Layout {
    /// Values of a vector: the weights, then the loss slot.
    pub(super) fn len(&self) -> usize {
        self.shape.len() + 1
    }

    /// Rows of a vector's table.
    pub(super) fn rows(&self) -> u64 {
        self.len().div_ceil(self.block) as u64
    }

    /// Values of a vector's rows, the last padded with zeros.
    pub(super) fn padded(&self) -> usize {
        self.rows() as usize * self.block
    }

    /// What the value at index `i` of a vector is.
    fn kind(&self, i: usize) -> Slot {
        let n = self.shape.len();
        if i < n && i % self.shape.width() != self.shape.features {
            Slot::Weight
        } else if i < n {
            Slot::Intercept
        } else if i == n {
            Slot::Loss
        } else {
            Slot::Padding
        }
    }
}

/// What a vector's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A weight (regularized).
    Weight,
    /// A class's intercept (not regularized).
    Intercept,
    /// The loss (in `raw` only).
    Loss,
    /// Beyond the vector.
    Padding,
}

/// The vectors' tables.
#[derive(Debug, Clone)]
pub(super) struct Vectors {
    pub(super) w: Table<f64>,
    pub(super) wt: Table<f64>,
    pub(super) raw: Table<f64>,
    pub(super) g: Table<f64>,
    pub(super) gt: Table<f64>,
    pub(super) d: Table<f64>,
    pub(super) s: Vec<Table<f64>>,
    pub(super) y: Vec<Table<f64>>,
}

impl Vectors {
    /// Creates the tables for a history of `m` steps (and one spare slot).
    pub(super) fn create(
        cluster: &mut Cluster,
        layout: Layout,
        m: usize,
    ) -> iterstore::Result<Self> {
        let (b, rows) = (layout.block, layout.rows());
        let mut table = |name: String| cluster.create_table_aligned::<f64>(&name, b, rows);
        let (w, wt, raw) = (
            table("logreg.w".into())?,
            table("logreg.wt".into())?,
            table("logreg.raw".into())?,
        );
        let (g, gt, d) = (
            table("logreg.g".into())?,
            table("logreg.gt".into())?,
            table("logreg.d".into())?,
        );
        let s = (0..=m)
            .map(|i| table(format!("logreg.s{i}")))
            .collect::<iterstore::Result<_>>()?;
        let y = (0..=m)
            .map(|i| table(format!("logreg.y{i}")))
            .collect::<iterstore::Result<_>>()?;
        Ok(Self {
            w,
            wt,
            raw,
            g,
            gt,
            d,
            s,
            y,
        })
    }
}

/// The registered vector operations (arguments and results in each one's docs). Of the
/// `M + 1` history slots, slot `i` is base vector `i` (its step) and `M + 1 + i` (its
/// gradient change) of the full Gram matrix, whose last base vector is `g`.
#[derive(Debug, Clone)]
pub(super) struct Functions {
    /// `[]` → the full Gram matrix of `[s₀ … s_M, y₀ … y_M, g]`, `(2M + 3)²` values
    /// row-major.
    pub(super) gram: ServerFn,
    /// `[m, slots…, δ…, t]` → nothing; `d = Σ δⱼ bⱼ` over `[s_slots…, y_slots…, g]`
    /// (oldest step first), then `wt = w + t·d`.
    pub(super) step: ServerFn,
    /// `[t]` → nothing; `wt = w + t·d`.
    pub(super) trial: ServerFn,
    /// `[1/n, λ]` → `[loss/n, ‖wt‖²]` (weights only); `gt = raw/n + λ·wt` (intercepts
    /// unregularized, the loss slot zero) and `raw = 0`.
    pub(super) finish: ServerFn,
    /// `[slot]` → `[s·y, the full Gram matrix after it…]`; with `slot ≥ 0`,
    /// `s[slot] = wt − w` and `y[slot] = gt − g`; then `w = wt`, `g = gt`.
    pub(super) accept: ServerFn,
}

/// A shard's home rows of the vectors (the same for every vector: they are aligned).
fn home(rows: &ShardRows<'_>, v: &Vectors) -> iterstore::Result<Vec<u64>> {
    rows.home_rows(&v.w)
}

/// `args[1..=m]` as slot indices below `slots`, or an error naming the function.
fn slots(f: &str, args: &[f64], slots: usize) -> iterstore::Result<Vec<usize>> {
    let bad = || Error::app(0, format!("{f}: bad arguments {args:?}"));
    let m = *args.first().ok_or_else(bad)?;
    if m < 0.0 || m.fract() != 0.0 || m as usize >= slots || args.len() <= m as usize {
        return Err(bad());
    }
    args[1..=m as usize]
        .iter()
        .map(|&s| {
            (s >= 0.0 && s.fract() == 0.0 && (s as usize) < slots)
                .then_some(s as usize)
                .ok_or_else(bad)
        })
        .collect()
}

/// The base vectors `[s_slots…, y_slots…, g]`.
fn base(v: &Vectors, slots: &[usize]) -> Vec<Table<f64>> {
    let mut base: Vec<Table<f64>> = slots.iter().map(|&i| v.s[i]).collect();
    base.extend(slots.iter().map(|&i| v.y[i]));
    base.push(v.g);
    base
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(p, q)| p * q).sum()
}

/// This shard's part of the full Gram matrix (row by row, each pair once).
fn full_gram(rows: &ShardRows<'_>, v: &Vectors, b: usize) -> iterstore::Result<Vec<f64>> {
    let all: Vec<usize> = (0..v.s.len()).collect();
    let base = base(v, &all);
    let k = base.len();
    let mut out = vec![0.0; k * k];
    let mut bufs = vec![vec![0.0; b]; k];
    for r in home(rows, v)? {
        for (buf, t) in bufs.iter_mut().zip(&base) {
            rows.read(t, r, buf)?;
        }
        for i in 0..k {
            for j in i..k {
                out[i * k + j] += dot(&bufs[i], &bufs[j]);
            }
        }
    }
    for i in 0..k {
        for j in 0..i {
            out[i * k + j] = out[j * k + i];
        }
    }
    Ok(out)
}

/// The Gram matrix of `[s_slots…, y_slots…, g]` (what
/// [`direction`](iterstore_algo::lbfgs::direction) takes) out of the full one of `total`
/// slots.
pub(super) fn sub_gram(full: &[f64], total: usize, slots: &[usize]) -> Vec<f64> {
    let k = 2 * total + 1;
    debug_assert_eq!(full.len(), k * k);
    let mut index: Vec<usize> = slots.to_vec();
    index.extend(slots.iter().map(|&i| total + i));
    index.push(2 * total);
    index
        .iter()
        .flat_map(|&i| index.iter().map(move |&j| full[i * k + j]))
        .collect()
}

impl Functions {
    /// Registers the operations on `v` (a collective, like every registration).
    pub(super) fn register(
        cluster: &mut Cluster,
        layout: Layout,
        v: &Vectors,
    ) -> iterstore::Result<Self> {
        let b = layout.block;
        let total = v.s.len();
        let vv = v.clone();
        let gram = cluster.register_function("logreg.gram", Reduce::Sum, move |rows, _| {
            full_gram(rows, &vv, b)
        })?;
        let vv = v.clone();
        let step = cluster.register_function("logreg.step", Reduce::Sum, move |rows, args| {
            let slots = slots("logreg.step", args, total)?;
            let base = base(&vv, &slots);
            let rest = &args[1 + slots.len()..];
            let Some((&t, delta)) = rest.split_last().filter(|(_, d)| d.len() == base.len()) else {
                return Err(Error::app(0, "logreg.step: bad coefficients"));
            };
            let (mut d, mut buf, mut x) = (vec![0.0; b], vec![0.0; b], vec![0.0; b]);
            for r in home(rows, &vv)? {
                d.fill(0.0);
                for (t, &c) in base.iter().zip(delta) {
                    rows.read(t, r, &mut buf)?;
                    for (dk, bk) in d.iter_mut().zip(&buf) {
                        *dk += c * bk;
                    }
                }
                rows.write(&vv.d, r, &d)?;
                rows.read(&vv.w, r, &mut x)?;
                for (xk, dk) in x.iter_mut().zip(&d) {
                    *xk += t * dk;
                }
                rows.write(&vv.wt, r, &x)?;
            }
            Ok(Vec::new())
        })?;
        let vv = v.clone();
        let trial = cluster.register_function("logreg.trial", Reduce::Sum, move |rows, args| {
            let &[t] = args else {
                return Err(Error::app(0, "logreg.trial: one argument"));
            };
            let (mut x, mut d) = (vec![0.0; b], vec![0.0; b]);
            for r in home(rows, &vv)? {
                rows.read(&vv.w, r, &mut x)?;
                rows.read(&vv.d, r, &mut d)?;
                for (xk, dk) in x.iter_mut().zip(&d) {
                    *xk += t * dk;
                }
                rows.write(&vv.wt, r, &x)?;
            }
            Ok(Vec::new())
        })?;
        let vv = v.clone();
        let finish =
            cluster.register_function("logreg.finish", Reduce::Sum, move |rows, args| {
                let &[scale, lambda] = args else {
                    return Err(Error::app(0, "logreg.finish: two arguments"));
                };
                let (mut raw, mut x, mut g) = (vec![0.0; b], vec![0.0; b], vec![0.0; b]);
                let zeros = vec![0.0; b];
                let (mut loss, mut reg) = (0.0, 0.0);
                for r in home(rows, &vv)? {
                    rows.read(&vv.raw, r, &mut raw)?;
                    rows.read(&vv.wt, r, &mut x)?;
                    for k in 0..b {
                        g[k] = match layout.kind(r as usize * b + k) {
                            Slot::Weight => {
                                reg += x[k] * x[k];
                                raw[k] * scale + lambda * x[k]
                            }
                            Slot::Intercept => raw[k] * scale,
                            Slot::Loss => {
                                loss += raw[k];
                                0.0
                            }
                            Slot::Padding => 0.0,
                        };
                    }
                    rows.write(&vv.gt, r, &g)?;
                    rows.write(&vv.raw, r, &zeros)?;
                }
                Ok(vec![loss * scale, reg])
            })?;
        let vv = v.clone();
        let accept =
            cluster.register_function("logreg.accept", Reduce::Sum, move |rows, args| {
                let &[slot] = args else {
                    return Err(Error::app(0, "logreg.accept: one argument"));
                };
                let slot = (slot >= 0.0)
                    .then(|| slots("logreg.accept", &[1.0, slot], total).map(|s| s[0]))
                    .transpose()?;
                let (mut x, mut xt) = (vec![0.0; b], vec![0.0; b]);
                let (mut g, mut gt) = (vec![0.0; b], vec![0.0; b]);
                let (mut s, mut y) = (vec![0.0; b], vec![0.0; b]);
                let mut sy = 0.0;
                for r in home(rows, &vv)? {
                    rows.read(&vv.w, r, &mut x)?;
                    rows.read(&vv.wt, r, &mut xt)?;
                    rows.read(&vv.g, r, &mut g)?;
                    rows.read(&vv.gt, r, &mut gt)?;
                    if let Some(slot) = slot {
                        for k in 0..b {
                            s[k] = xt[k] - x[k];
                            y[k] = gt[k] - g[k];
                        }
                        sy += dot(&s, &y);
                        rows.write(&vv.s[slot], r, &s)?;
                        rows.write(&vv.y[slot], r, &y)?;
                    }
                    rows.write(&vv.w, r, &xt)?;
                    rows.write(&vv.g, r, &gt)?;
                }
                let mut out = vec![sy];
                out.extend(full_gram(rows, &vv, b)?);
                Ok(out)
            })?;
        Ok(Self {
            gram,
            step,
            trial,
            finish,
            accept,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_is_its_weights_then_the_loss_then_padding() {
        let layout = Layout {
            shape: Shape {
                classes: 2,
                features: 3,
            },
            block: 3,
        };
        assert_eq!((layout.len(), layout.rows(), layout.padded()), (9, 3, 9));
        let kinds: Vec<Slot> = (0..9).map(|i| layout.kind(i)).collect();
        use Slot::*;
        assert_eq!(
            kinds,
            [Weight, Weight, Weight, Intercept, Weight, Weight, Weight, Intercept, Loss]
        );
        let wide = Layout { block: 4, ..layout };
        assert_eq!((wide.rows(), wide.padded(), wide.kind(9)), (3, 12, Padding));
    }

    #[test]
    fn the_history_s_gram_matrix_is_taken_out_of_the_full_one() {
        // 2 slots: base [s0, s1, y0, y1, g]; entry (i, j) = 10·i + j.
        let full: Vec<f64> = (0..25).map(|e| f64::from(10 * (e / 5) + e % 5)).collect();
        // History: slot 1 then slot 0 → [s1, s0, y1, y0, g] = full indices [1, 0, 3, 2, 4].
        let sub = sub_gram(&full, 2, &[1, 0]);
        let idx = [1, 0, 3, 2, 4];
        let want: Vec<f64> = idx
            .iter()
            .flat_map(|&i| idx.iter().map(move |&j| f64::from(10 * i + j)))
            .collect();
        assert_eq!(sub, want);
        assert_eq!(sub_gram(&full, 2, &[]), vec![44.0]);
    }

    #[test]
    fn slot_arguments_are_checked() {
        assert_eq!(slots("f", &[2.0, 3.0, 0.0, 9.0], 4).unwrap(), [3, 0]);
        assert_eq!(slots("f", &[0.0], 4).unwrap(), Vec::<usize>::new());
        for bad in [
            &[][..],
            &[4.0],
            &[1.0],
            &[1.0, 4.0],
            &[1.0, -1.0],
            &[0.5, 0.0],
        ] {
            assert!(slots("f", bad, 4).is_err(), "{bad:?}");
        }
    }
}
