//! A simulated training: gradient descent on `0.5 (x1² + 10 x2²)` from `(1, 1)`, whose
//! reported loss adds `floor × lr` — the level at which SGD's gradient noise keeps a
//! rate's loss, in expectation, which is what makes a large rate plateau. Each clock
//! takes 1 s; validation is `1 / (1 + loss)`. Rates above 0.2 diverge; the fastest is
//! about 0.18.

use iterstore_tune::{BranchId, Measured, Setting, Trainer};
use std::collections::BTreeMap;

#[derive(Clone)]
struct State {
    x: [f64; 2],
    lr: f64,
}

pub struct Sim {
    floor: f64,
    branches: BTreeMap<BranchId, State>,
    next: BranchId,
    forks: usize,
    recorded: BTreeMap<BranchId, f64>,
    pub fail_fork_after: Option<usize>,
}

const A: [f64; 2] = [1.0, 10.0];

impl Sim {
    pub fn new(floor: f64) -> Self {
        let root = State {
            x: [1.0, 1.0],
            lr: 0.0,
        };
        Self {
            floor,
            branches: BTreeMap::from([(0, root)]),
            next: 1,
            forks: 0,
            recorded: BTreeMap::new(),
            fail_fork_after: None,
        }
    }

    pub fn alive(&self) -> Vec<BranchId> {
        self.branches.keys().copied().collect()
    }

    /// The learning rate `b` was forked with (freed branches too).
    pub fn setting_of(&self, b: BranchId) -> Option<f64> {
        self.recorded.get(&b).copied()
    }
}

fn loss(s: &State, floor: f64) -> f64 {
    0.5 * (A[0] * s.x[0] * s.x[0] + A[1] * s.x[1] * s.x[1]) + floor * s.lr
}

impl Trainer for Sim {
    type Error = String;

    fn root(&self) -> BranchId {
        0
    }

    fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, String> {
        self.forks += 1;
        if self.fail_fork_after.is_some_and(|n| self.forks > n) {
            return Err(format!("fork {} failed (simulated)", self.forks));
        }
        let mut s = self.branches.get(&parent).ok_or("no parent")?.clone();
        s.lr = setting.get("lr").ok_or("no lr")?;
        let id = self.next;
        self.next += 1;
        self.recorded.insert(id, s.lr);
        self.branches.insert(id, s);
        Ok(id)
    }

    fn train(&mut self, branch: BranchId, clocks: u64) -> Result<Vec<Measured>, String> {
        let floor = self.floor;
        let s = self
            .branches
            .get_mut(&branch)
            .ok_or("freed branch trained")?;
        let mut out = Vec::new();
        for _ in 0..clocks {
            for (x, a) in s.x.iter_mut().zip(A) {
                *x -= s.lr * a * *x;
            }
            out.push(Measured {
                seconds: 1.0,
                value: loss(s, floor),
            });
        }
        Ok(out)
    }

    fn loss(&mut self, branch: BranchId) -> Result<Measured, String> {
        let s = self.branches.get(&branch).ok_or("freed branch measured")?;
        Ok(Measured {
            seconds: 0.5,
            value: loss(s, self.floor),
        })
    }

    fn evaluate(&mut self, branch: BranchId) -> Result<Measured, String> {
        let s = self.branches.get(&branch).ok_or("freed branch evaluated")?;
        Ok(Measured {
            seconds: 0.5,
            value: 1.0 / (1.0 + loss(s, self.floor)),
        })
    }

    fn free(&mut self, branch: BranchId) -> Result<(), String> {
        self.branches
            .remove(&branch)
            .map(|_| ())
            .ok_or_else(|| format!("branch {branch} freed twice"))
    }
}
