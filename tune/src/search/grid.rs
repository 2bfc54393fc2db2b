//! Grid search: every combination of each tunable's grid values
//! ([`Domain::grid`](crate::space::Domain::grid)), the first tunable varying slowest.

use super::Searcher;
use crate::space::{Setting, Space};

/// The points of a grid, proposed in order.
pub(super) struct Grid {
    names: Vec<String>,
    values: Vec<Vec<f64>>,
    next: usize,
    total: usize,
}

impl Grid {
    pub(super) fn new(space: &Space, points: usize) -> Self {
        let values: Vec<Vec<f64>> = space
            .tunables()
            .iter()
            .map(|t| t.domain().grid(points))
            .collect();
        Self {
            names: space
                .tunables()
                .iter()
                .map(|t| t.name().to_string())
                .collect(),
            total: values.iter().map(Vec::len).product(),
            values,
            next: 0,
        }
    }
}

impl Searcher for Grid {
    fn propose(&mut self) -> Option<Setting> {
        if self.next >= self.total {
            return None;
        }
        let mut rest = self.next;
        let mut picked = vec![0.0; self.values.len()];
        for (i, vs) in self.values.iter().enumerate().rev() {
            picked[i] = vs[rest % vs.len()];
            rest /= vs.len();
        }
        self.next += 1;
        Some(Setting::new(
            self.names.iter().cloned().zip(picked).collect(),
        ))
    }

    fn observe(&mut self, _: &Setting, _: Option<f64>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Tunable;

    #[test]
    fn a_grid_proposes_every_combination_once() {
        let space = Space::new(vec![
            Tunable::choice("batch", vec![16.0, 32.0]),
            Tunable::uniform("momentum", 0.0, 0.9),
        ])
        .unwrap();
        let mut g = Grid::new(&space, 3);
        let mut seen = Vec::new();
        while let Some(s) = g.propose() {
            seen.push((s.get("batch").unwrap(), s.get("momentum").unwrap()));
        }
        assert_eq!(
            seen,
            vec![
                (16.0, 0.0),
                (16.0, 0.45),
                (16.0, 0.9),
                (32.0, 0.0),
                (32.0, 0.45),
                (32.0, 0.9)
            ]
        );
    }
}
