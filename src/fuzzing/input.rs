//! [`Input`]: fuzz input read front to back as the values of messages' fields — integers,
//! byte strings, counts, keys, rows, rule states, tables' metas and rules (custom ones
//! too) — zeros (or nothing) past its end, so that any bytes make some message.

use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::ids::RowKey;
use crate::msg::{RuleState, RuleStates};
use crate::rule::{CustomRule, MAX_RULE_NAME, MAX_RULE_PARAMS, MAX_RULE_STATE};
use crate::table::TableMeta;

/// Reads fuzz input front to back; past its end every read gives zeros (or nothing).
pub(super) struct Input<'a>(pub(super) &'a [u8]);

impl<'a> Input<'a> {
    pub(super) fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub(super) fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    /// A byte string of up to 255 bytes, its length read first.
    pub(super) fn bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.take(n)
    }

    /// A count of up to 7 items.
    pub(super) fn count(&mut self) -> usize {
        usize::from(self.u8() % 8)
    }

    pub(super) fn string(&mut self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }

    pub(super) fn buf(&mut self) -> AlignedBuf {
        AlignedBuf::from_bytes(self.bytes())
    }

    pub(super) fn key(&mut self) -> RowKey {
        RowKey::new(self.u32(), self.u64())
    }

    pub(super) fn u32s(&mut self) -> Vec<u32> {
        (0..self.count()).map(|_| self.u32()).collect()
    }

    pub(super) fn opt_u32s(&mut self) -> Option<Vec<u32>> {
        (self.u8() & 1 == 1).then(|| self.u32s())
    }

    pub(super) fn rows(&mut self) -> Vec<(RowKey, AlignedBuf)> {
        (0..self.count())
            .map(|_| (self.key(), self.buf()))
            .collect()
    }

    pub(super) fn states(&mut self) -> RuleStates {
        (0..self.count())
            .map(|_| {
                let key = self.key();
                let steps = self.u64();
                (
                    key,
                    RuleState {
                        steps,
                        state: self.buf(),
                    },
                )
            })
            .collect()
    }

    pub(super) fn meta(&mut self) -> TableMeta {
        TableMeta {
            id: self.u32(),
            name: self.string(),
            width: self.u64() as usize,
            elem: self.elem(),
            rows: self.row_count(),
            rule: self.rule(),
        }
    }

    pub(super) fn row_count(&mut self) -> Option<u64> {
        (self.u8() & 1 == 1).then(|| self.u64())
    }

    /// A rule: the byte picking it is a built-in rule's kind modulo 6, except for its top
    /// four values (252 to 255), which pick a [`Rule::Custom`](crate::rule::Rule::Custom)
    /// (added with protocol version 10; the inputs written before keep their rules but for
    /// those four values).
    pub(super) fn rule(&mut self) -> crate::rule::Rule {
        use crate::rule::Rule;
        let pick = self.u8();
        if pick >= 252 {
            return Rule::Custom(self.custom_rule());
        }
        let kind = pick % 6;
        let mut f = || f64::from_bits(self.u64());
        match kind {
            0 => Rule::Sum,
            1 => Rule::Sgd { lr: f() },
            2 => Rule::Momentum {
                lr: f(),
                momentum: f(),
            },
            3 => Rule::AdaGrad {
                lr: f(),
                eps: f(),
                initial: f(),
            },
            4 => Rule::RmsProp {
                lr: f(),
                decay: f(),
                eps: f(),
            },
            _ => Rule::Adam {
                lr: f(),
                beta1: f(),
                beta2: f(),
                eps: f(),
            },
        }
    }

    /// A custom rule within the limits a rule arriving is checked against: a name of 1 to
    /// `MAX_RULE_NAME` bytes (cut at a character boundary, `r` if empty), up to
    /// `MAX_RULE_PARAMS` parameters and up to `MAX_RULE_STATE` elements of state.
    pub(super) fn custom_rule(&mut self) -> CustomRule {
        let mut name = self.string();
        let mut end = name.len().min(MAX_RULE_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        if name.is_empty() {
            name.push('r');
        }
        let params: Vec<f64> = (0..usize::from(self.u8()) % (MAX_RULE_PARAMS + 1))
            .map(|_| f64::from_bits(self.u64()))
            .collect();
        let state = usize::from(self.u8()) % (MAX_RULE_STATE + 1);
        CustomRule::new(&name, &params, state).expect("within the limits")
    }

    pub(super) fn elem(&mut self) -> ElemType {
        [ElemType::F32, ElemType::F64, ElemType::I32, ElemType::I64][usize::from(self.u8() % 4)]
    }

    pub(super) fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[usize::from(self.u8()) % choices.len()]
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
