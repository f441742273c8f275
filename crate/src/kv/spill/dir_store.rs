//! The native spill store: one file per record, `<root>/<fingerprint>/<chain hash>.rxkv`
//! (hex). A record is written to a temporary name in the same folder and renamed into place,
//! so a reader sees it whole or not at all; the file's modification time is its last use, so
//! the LRU order survives restarts and is shared by processes using the same folder.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::lru::LruIndex;
use super::{RecordKey, SpillStore, StoreError, StoreStats};

const RECORD_EXT: &str = "rxkv";
const TEMP_MARK: &str = ".tmp-";
/// A temporary file older than this was left by a writer that died; younger ones may belong to
/// a live process sharing the folder.
const STALE_TEMP: Duration = Duration::from_secs(600);

pub struct DirStore {
    root: PathBuf,
    budget: u64,
    index: LruIndex,
    /// Last-use order of this process's uses, continuing the files' times sorted at open.
    clock: u64,
    temp_counter: u64,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{what} {}: {e}", path.display()))
}

fn parse_hex(name: &str) -> Option<u128> {
    (name.len() == 32).then(|| u128::from_str_radix(name, 16).ok()).flatten()
}

impl DirStore {
    /// Opens (creating it if needed) the store in `root`, indexing the records there, removing
    /// stale temporary files and trimming to `budget_bytes`.
    pub fn open(root: impl Into<PathBuf>, budget_bytes: u64) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| io("creating", &root, e))?;
        let mut found = Vec::new();
        for model_dir in fs::read_dir(&root).map_err(|e| io("reading", &root, e))?.flatten() {
            let Some(fingerprint) = model_dir.file_name().to_str().and_then(parse_hex) else { continue };
            let Ok(files) = fs::read_dir(model_dir.path()) else { continue };
            for file in files.flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                let Ok(meta) = file.metadata() else { continue };
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                if name.contains(TEMP_MARK) {
                    if modified.elapsed().is_ok_and(|age| age > STALE_TEMP) {
                        let _ = fs::remove_file(file.path());
                    }
                    continue;
                }
                let Some(hash) = name.strip_suffix(&format!(".{RECORD_EXT}")).and_then(parse_hex) else { continue };
                found.push((modified, RecordKey { fingerprint, hash }, meta.len()));
            }
        }
        found.sort();
        let mut store = Self { root, budget: budget_bytes, index: LruIndex::default(), clock: 0, temp_counter: 0 };
        for (_, key, bytes) in found {
            store.track(key, bytes);
        }
        store.evict_until(0);
        Ok(store)
    }

    fn path(&self, key: &RecordKey) -> PathBuf {
        self.root.join(format!("{:032x}", key.fingerprint)).join(format!("{:032x}.{RECORD_EXT}", key.hash))
    }

    fn track(&mut self, key: RecordKey, bytes: u64) {
        self.clock += 1;
        self.index.track(key, bytes, self.clock);
    }

    /// Removes least recently used records until `incoming` more bytes fit the budget.
    fn evict_until(&mut self, incoming: u64) {
        self.remove_down_to(self.budget.saturating_sub(incoming));
    }

    /// Removes least recently used records until they total at most `target` bytes.
    fn remove_down_to(&mut self, target: u64) {
        for key in self.index.oldest_down_to(target) {
            self.remove(&key);
        }
    }

    fn remove(&mut self, key: &RecordKey) {
        let _ = fs::remove_file(self.path(key));
        self.index.untrack(key);
    }

    /// Writes `bytes` to a temporary file beside the record, then renames it into place.
    fn write_atomically(&mut self, key: &RecordKey, bytes: &[u8]) -> Result<(), std::io::Error> {
        let path = self.path(key);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        self.temp_counter += 1;
        let temp = path.with_extension(format!("{RECORD_EXT}{TEMP_MARK}{}-{}", std::process::id(), self.temp_counter));
        let written = fs::write(&temp, bytes).and_then(|()| fs::rename(&temp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written
    }
}

#[async_trait(?Send)]
impl SpillStore for DirStore {
    async fn get(&mut self, keys: &[RecordKey]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let path = self.path(key);
            match fs::read(&path) {
                Ok(bytes) => {
                    // The file's time records the use for later processes; failing to set it
                    // only costs LRU accuracy.
                    if let Ok(file) = fs::File::options().write(true).open(&path) {
                        let _ = file.set_modified(SystemTime::now());
                    }
                    self.track(*key, bytes.len() as u64);
                    out.push(Some(bytes));
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.index.untrack(key);
                    out.push(None);
                }
                Err(e) => return Err(io("reading", &path, e)),
            }
        }
        Ok(out)
    }

    async fn put(&mut self, records: Vec<(RecordKey, Vec<u8>)>) -> Result<usize, StoreError> {
        let mut stored = 0;
        for (key, bytes) in records {
            let len = bytes.len() as u64;
            if len > self.budget {
                continue;
            }
            self.index.untrack(&key);
            self.evict_until(len);
            if let Err(first) = self.write_atomically(&key, &bytes) {
                // Out of disk (or another write failure): make room from the oldest records
                // and try once more before giving up on this record.
                self.remove_down_to(self.index.total() / 2);
                if let Err(second) = self.write_atomically(&key, &bytes) {
                    return Err(StoreError::Quota(format!("writing {}: {first}; after evicting: {second}", self.path(&key).display())));
                }
            }
            self.track(key, len);
            stored += 1;
        }
        Ok(stored)
    }

    async fn delete(&mut self, keys: &[RecordKey]) -> Result<(), StoreError> {
        for key in keys {
            self.remove(key);
        }
        Ok(())
    }

    async fn keys(&mut self, fingerprint: u128) -> Result<Vec<RecordKey>, StoreError> {
        Ok(self.index.keys_of(fingerprint))
    }

    async fn clear(&mut self, fingerprint: u128) -> Result<(), StoreError> {
        for key in &self.index.keys_of(fingerprint) {
            self.remove(key);
        }
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        StoreStats { records: self.index.len(), bytes: self.index.total(), budget_bytes: self.budget }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// Runs a future of this store, which never waits on anything.
    fn block_on_local<F: Future>(f: F) -> F::Output {
        match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("the directory store's futures are ready at once"),
        }
    }

    fn key(hash: u128) -> RecordKey {
        RecordKey { fingerprint: 7, hash }
    }

    #[test]
    fn records_survive_reopening_and_the_budget_evicts_the_least_recent() {
        let dir = tempfile::tempdir().unwrap();
        block_on_local(async {
            let mut store = DirStore::open(dir.path(), 300).unwrap();
            assert_eq!(store.put(vec![(key(1), vec![1; 100]), (key(2), vec![2; 100])]).await.unwrap(), 2);
            assert_eq!(store.get(&[key(1)]).await.unwrap(), vec![Some(vec![1; 100])]);
            // Key 2 is now the least recently used: a third and fourth record push it out.
            store.put(vec![(key(3), vec![3; 100]), (key(4), vec![4; 100])]).await.unwrap();
            assert_eq!(store.get(&[key(2)]).await.unwrap(), vec![None]);
            assert_eq!(store.stats(), StoreStats { records: 3, bytes: 300, budget_bytes: 300 });
            assert_eq!(store.put(vec![(key(5), vec![0; 301])]).await.unwrap(), 0, "larger than the budget");

            let mut again = DirStore::open(dir.path(), 300).unwrap();
            let mut keys = again.keys(7).await.unwrap();
            keys.sort();
            assert_eq!(keys, vec![key(1), key(3), key(4)]);
            assert_eq!(again.get(&[key(4)]).await.unwrap(), vec![Some(vec![4; 100])]);
            again.clear(7).await.unwrap();
            assert_eq!(again.stats().records, 0);
            assert_eq!(again.get(&[key(4)]).await.unwrap(), vec![None]);
        });
    }

    #[test]
    fn a_half_written_temporary_file_is_never_a_record() {
        let dir = tempfile::tempdir().unwrap();
        block_on_local(async {
            let mut store = DirStore::open(dir.path(), 1 << 20).unwrap();
            store.put(vec![(key(1), vec![1; 10])]).await.unwrap();
            let record = store.path(&key(1));
            let temp = record.with_extension(format!("{RECORD_EXT}{TEMP_MARK}1-1"));
            fs::write(&temp, [9; 5]).unwrap();
            let partial = store.path(&key(2)).with_extension(format!("{RECORD_EXT}{TEMP_MARK}1-2"));
            fs::write(&partial, [9; 5]).unwrap();
            let mut reopened = DirStore::open(dir.path(), 1 << 20).unwrap();
            assert_eq!(reopened.stats().records, 1);
            assert_eq!(reopened.get(&[key(2)]).await.unwrap(), vec![None]);
            assert_eq!(reopened.get(&[key(1)]).await.unwrap(), vec![Some(vec![1; 10])]);
        });
    }
}
