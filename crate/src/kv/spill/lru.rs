//! The in-memory index both stores keep of their records: size and last use per key, the total,
//! and the least-recently-used order their budgets evict in.

use std::collections::{BTreeSet, HashMap};

use super::RecordKey;

#[derive(Default)]
pub struct LruIndex {
    /// Per record: (bytes, last use). A last use is any number that grows with time.
    entries: HashMap<RecordKey, (u64, u64)>,
    /// (last use, key), oldest first.
    order: BTreeSet<(u64, RecordKey)>,
    total: u64,
}

impl LruIndex {
    /// Records `key` as holding `bytes`, last used at `used` (replacing what it held).
    pub fn track(&mut self, key: RecordKey, bytes: u64, used: u64) {
        self.untrack(&key);
        self.entries.insert(key, (bytes, used));
        self.order.insert((used, key));
        self.total += bytes;
    }

    pub fn untrack(&mut self, key: &RecordKey) {
        if let Some((bytes, used)) = self.entries.remove(key) {
            self.order.remove(&(used, *key));
            self.total -= bytes;
        }
    }

    /// The least recently used records whose removal brings the total down to `target` bytes.
    pub fn oldest_down_to(&self, target: u64) -> Vec<RecordKey> {
        let mut total = self.total;
        let mut out = Vec::new();
        for (_, key) in &self.order {
            if total <= target {
                break;
            }
            total -= self.entries.get(key).map_or(0, |e| e.0);
            out.push(*key);
        }
        out
    }

    /// Keys held for the model `fingerprint`.
    pub fn keys_of(&self, fingerprint: u128) -> Vec<RecordKey> {
        self.entries.keys().filter(|k| k.fingerprint == fingerprint).copied().collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}
