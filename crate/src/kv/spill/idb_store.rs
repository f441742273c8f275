//! The browser's spill store: IndexedDB, per origin. Two object stores under the same keys
//! (`<fingerprint>:<chain hash>`, hex): `records` holds each record's bytes, `meta` its size and
//! last use, so opening reads only the small `meta` entries. Every write is one readwrite
//! transaction over both, so a record and its meta appear together, whole, or not at all; a
//! read never sees a transaction that has not committed.
//!
//! Requests of a transaction are all issued before the first is awaited: IndexedDB commits a
//! transaction that has nothing pending when control returns to the event loop. Each request
//! becomes a future (its success and error handlers attached) as it is issued: one awaited only
//! after another could succeed unheard, since a waker may run the task after IndexedDB's next
//! event (the threaded build's executor wakes tasks through `Atomics.waitAsync`, a task, not a
//! microtask).

use std::future::IntoFuture;

use async_trait::async_trait;
use idb::{Database, DatabaseEvent, Factory, ObjectStoreParams, Transaction, TransactionMode, TransactionResult};
use js_sys::{Array, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use super::lru::LruIndex;
use super::{RecordKey, SpillStore, StoreError, StoreStats};

const DB_NAME: &str = "radixlm-spill";
const DB_VERSION: u32 = 1;
const RECORDS: &str = "records";
const META: &str = "meta";

pub struct IdbStore {
    db: Database,
    budget: u64,
    /// Last uses are ms since the epoch, as ordered bits.
    index: LruIndex,
}

fn io(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!("IndexedDB {what}: {e}"))
}

/// A failed write, as a quota error when the origin's storage quota is its cause.
fn write_error(e: impl std::fmt::Display) -> StoreError {
    let text = e.to_string();
    if text.contains("Quota") {
        StoreError::Quota(text)
    } else {
        io("write", text)
    }
}

/// Commits `tx` and waits for it. An aborted transaction (a full quota aborts one at commit)
/// is an error naming the cause `probe` (another handle on the same transaction) reports.
async fn commit(tx: Transaction, probe: Transaction) -> Result<(), StoreError> {
    match tx.commit().map_err(write_error)?.await.map_err(write_error)? {
        TransactionResult::Committed => Ok(()),
        TransactionResult::Aborted => Err(write_error(
            probe.error().map_or_else(|| "transaction aborted".to_string(), |e| format!("{}: {}", e.name(), e.message())),
        )),
    }
}

fn key_string(key: &RecordKey) -> JsValue {
    JsValue::from_str(&format!("{:032x}:{:032x}", key.fingerprint, key.hash))
}

fn parse_key(value: &JsValue) -> Option<RecordKey> {
    let text = value.as_string()?;
    let (fp, hash) = text.split_once(':')?;
    Some(RecordKey { fingerprint: u128::from_str_radix(fp, 16).ok()?, hash: u128::from_str_radix(hash, 16).ok()? })
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Order key of a last-use time: non-negative f64s order like their bits.
fn order(used: f64) -> u64 {
    used.max(0.0).to_bits()
}

fn meta_value(bytes: u64, used: f64) -> JsValue {
    Array::of2(&JsValue::from_f64(bytes as f64), &JsValue::from_f64(used)).into()
}

impl IdbStore {
    /// Opens (creating it if needed) the origin's spill database and indexes its records.
    pub async fn open(budget_bytes: u64) -> Result<Self, StoreError> {
        let factory = Factory::new().map_err(|e| io("is not available", e))?;
        let mut request = factory.open(DB_NAME, Some(DB_VERSION)).map_err(|e| io("open", e))?;
        request.on_upgrade_needed(|event| {
            if let Ok(db) = event.database() {
                for name in [RECORDS, META] {
                    if !db.store_names().iter().any(|n| n == name) {
                        let _ = db.create_object_store(name, ObjectStoreParams::new());
                    }
                }
            }
        });
        let db = request.await.map_err(|e| io("open", e))?;
        let mut store = Self { db, budget: budget_bytes, index: LruIndex::default() };
        let tx = store.db.transaction(&[META], TransactionMode::ReadOnly).map_err(|e| io("read", e))?;
        let meta = tx.object_store(META).map_err(|e| io("read", e))?;
        let keys = meta.get_all_keys(None, None).map_err(|e| io("read", e))?.into_future();
        let values = meta.get_all(None, None).map_err(|e| io("read", e))?.into_future();
        let (keys, values) = (keys.await.map_err(|e| io("read", e))?, values.await.map_err(|e| io("read", e))?);
        for (key, value) in keys.iter().zip(values.iter()) {
            let (Some(key), Some(entry)) = (parse_key(key), value.dyn_ref::<Array>()) else { continue };
            let (bytes, used) = (entry.get(0).as_f64().unwrap_or(0.0), entry.get(1).as_f64().unwrap_or(0.0));
            store.index.track(key, bytes as u64, order(used));
        }
        let over = store.oldest_until(0);
        if !over.is_empty() {
            store.remove_all(&over).await?;
        }
        Ok(store)
    }

    /// The least recently used records whose removal lets `incoming` more bytes fit.
    fn oldest_until(&self, incoming: u64) -> Vec<RecordKey> {
        self.index.oldest_down_to(self.budget.saturating_sub(incoming))
    }

    async fn remove_all(&mut self, keys: &[RecordKey]) -> Result<(), StoreError> {
        let tx = self.db.transaction(&[RECORDS, META], TransactionMode::ReadWrite).map_err(|e| io("delete", e))?;
        let (records, meta) = (tx.object_store(RECORDS).map_err(|e| io("delete", e))?, tx.object_store(META).map_err(|e| io("delete", e))?);
        for key in keys {
            records.delete(key_string(key)).map_err(|e| io("delete", e))?;
            meta.delete(key_string(key)).map_err(|e| io("delete", e))?;
        }
        commit(tx, records.transaction()).await?;
        for key in keys {
            self.index.untrack(key);
        }
        Ok(())
    }

    /// One transaction: drop `evict`, then write `records`.
    async fn write(&self, evict: &[RecordKey], records: &[(RecordKey, Vec<u8>)], used: f64) -> Result<(), StoreError> {
        let tx = self.db.transaction(&[RECORDS, META], TransactionMode::ReadWrite).map_err(write_error)?;
        let (store, meta) = (tx.object_store(RECORDS).map_err(write_error)?, tx.object_store(META).map_err(write_error)?);
        for key in evict {
            store.delete(key_string(key)).map_err(write_error)?;
            meta.delete(key_string(key)).map_err(write_error)?;
        }
        for (key, bytes) in records {
            let value: JsValue = Uint8Array::from(bytes.as_slice()).into();
            store.put(&value, Some(&key_string(key))).map_err(write_error)?;
            meta.put(&meta_value(bytes.len() as u64, used), Some(&key_string(key))).map_err(write_error)?;
        }
        commit(tx, store.transaction()).await
    }
}

#[async_trait(?Send)]
impl SpillStore for IdbStore {
    async fn get(&mut self, keys: &[RecordKey]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let tx = self.db.transaction(&[RECORDS], TransactionMode::ReadOnly).map_err(|e| io("read", e))?;
        let store = tx.object_store(RECORDS).map_err(|e| io("read", e))?;
        let requests = keys.iter().map(|k| store.get(key_string(k)).map(IntoFuture::into_future)).collect::<Result<Vec<_>, _>>().map_err(|e| io("read", e))?;
        let mut out = Vec::with_capacity(keys.len());
        for (key, request) in keys.iter().zip(requests) {
            let value = request.await.map_err(|e| io("read", e))?;
            match value.and_then(|v| v.dyn_into::<Uint8Array>().ok()) {
                Some(bytes) => out.push(Some(bytes.to_vec())),
                None => {
                    self.index.untrack(key);
                    out.push(None);
                }
            }
        }
        // The hits' new last use; failing to record it costs only LRU accuracy.
        let used = now_ms();
        let hits: Vec<(RecordKey, u64)> = keys.iter().zip(&out).filter_map(|(k, v)| v.as_ref().map(|b| (*k, b.len() as u64))).collect();
        if let Ok(tx) = self.db.transaction(&[META], TransactionMode::ReadWrite) {
            if let Ok(meta) = tx.object_store(META) {
                for (key, bytes) in &hits {
                    let _ = meta.put(&meta_value(*bytes, used), Some(&key_string(key)));
                }
                let _ = commit(tx, meta.transaction()).await;
            }
        }
        for (key, bytes) in hits {
            self.index.track(key, bytes, order(used));
        }
        Ok(out)
    }

    async fn put(&mut self, records: Vec<(RecordKey, Vec<u8>)>) -> Result<usize, StoreError> {
        let records: Vec<(RecordKey, Vec<u8>)> = records.into_iter().filter(|(_, b)| b.len() as u64 <= self.budget).collect();
        if records.is_empty() {
            return Ok(0);
        }
        for (key, _) in &records {
            self.index.untrack(key);
        }
        let incoming: u64 = records.iter().map(|(_, b)| b.len() as u64).sum::<u64>().min(self.budget);
        let evict = self.oldest_until(incoming);
        let used = now_ms();
        let result = match self.write(&evict, &records, used).await {
            Err(StoreError::Quota(_)) => {
                // The origin's quota is smaller than our budget: give up the older half of what
                // we hold as well, and try once more.
                let keep = self.index.total() / 2;
                // Both are prefixes of the same LRU order, so this one holds `evict` too.
                let more = self.index.oldest_down_to(keep.min(self.budget.saturating_sub(incoming)));
                let retried = self.write(&more, &records, used).await;
                if retried.is_ok() {
                    self.budget = self.budget.min(keep + incoming);
                }
                retried.map(|()| more)
            }
            other => other.map(|()| evict),
        };
        let evicted = result?;
        for key in &evicted {
            self.index.untrack(key);
        }
        for (key, bytes) in &records {
            self.index.track(*key, bytes.len() as u64, order(used));
        }
        Ok(records.len())
    }

    async fn delete(&mut self, keys: &[RecordKey]) -> Result<(), StoreError> {
        self.remove_all(keys).await
    }

    async fn keys(&mut self, fingerprint: u128) -> Result<Vec<RecordKey>, StoreError> {
        Ok(self.index.keys_of(fingerprint))
    }

    async fn clear(&mut self, fingerprint: u128) -> Result<(), StoreError> {
        let keys = self.index.keys_of(fingerprint);
        self.remove_all(&keys).await
    }

    fn stats(&self) -> StoreStats {
        StoreStats { records: self.index.len(), bytes: self.index.total(), budget_bytes: self.budget }
    }
}
