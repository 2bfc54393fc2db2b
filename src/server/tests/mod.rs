//! The driver's tests: the cell that drives a shard ([`ShardCell`]), and the IO it
//! does for the shard (a checkpoint's part written through `crate::checkpoint`, and the
//! outcome handed back). The shard's own tests, which do no IO, are in `shard/tests/`.

mod cell;
mod checkpoint;

use super::*;

/// A message handled as the shard's driver handles it ([`step`]): the checkpoint part it
/// asks for is written, and the shard answers.
trait Step {
    fn step(&mut self, msg: ToShard, out: &mut Vec<Envelope>);
}

impl Step for Shard {
    fn step(&mut self, msg: ToShard, out: &mut Vec<Envelope>) {
        step(self, msg, out);
    }
}
