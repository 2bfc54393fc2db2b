//! [`LocalArena`]: the process arena of a shard's own OS process, into which the shard
//! writes that process's arena refreshes straight from its own arena.
//!
//! A refresh for a process in another OS process must travel as a message
//! ([`ToClient::SlabRows`](crate::msg::ToClient::SlabRows)): its rows copied out of the shard's
//! arena into the message, then copied again into the process's arena on arrival. For the
//! shard's own process both copies are one: the shard hands the process the rows as
//! slices of its arena, which the process copies into its own. The refresh is the same
//! (the same rows, positions and data clock, recorded as sent alike) and arrives in the
//! same order relative to the shard's other refreshes, since the shard writes it while
//! producing it; only the other messages of the same step reach the process after it.

use super::arena::RefreshRows;
use crate::ids::{Clock, ShardId};

/// The process arena of the shard's own OS process (see the module docs).
pub(crate) trait LocalArena: Send + Sync {
    /// Writes the refresh `rows` of chunk `chunk` of shard `shard`, at `data_clock`, for
    /// the plan `epoch`: what the process does on receiving the same refresh as a
    /// message (a refresh for another plan than the process's current one is stale and
    /// dropped; a malformed one fails the process, naming the shard).
    fn write_refresh(
        &self,
        shard: ShardId,
        epoch: u32,
        chunk: u32,
        data_clock: Clock,
        rows: &RefreshRows<'_>,
    );
}
