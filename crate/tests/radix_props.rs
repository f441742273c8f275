//! Property tests of the radix tree against a naive model: a map from every cached prefix (in
//! whole pages) to the page holding its last page, with a logical access time per page. Random
//! operations over a small alphabet, on sequences cut from a few shared bases, so prefixes
//! collide and edges split often. Pages come from a `PageAllocator`, so leaks and double frees
//! surface as pool accounting errors.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use radixlm::kv::{chain_pages, InsertResult, NodeId, PageAllocator, PageHash, PrefixMatch, RadixTree};

const POOL_PAGES: u32 = 40;
const FINGERPRINT: u128 = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;

/// A sequence: the first `keep` tokens of base `base`, then `tail`.
#[derive(Debug, Clone)]
struct Seq {
    base: usize,
    keep: usize,
    tail: Vec<u32>,
}

#[derive(Debug, Clone)]
enum Op {
    /// Insert with fresh pages for every page, as if computed without the cache.
    Insert(Seq),
    /// The engine's flow: match, lock, allocate the rest, insert matched + new pages, unlock;
    /// optionally keep a lock on the inserted sequence, as a still-running request would.
    Extend {
        seq: Seq,
        keep_lock: bool,
    },
    Match(Seq),
    Lock(Seq),
    Unlock(usize),
    Pin(Seq),
    Unpin(usize),
    Evict(usize),
    Clear,
}

fn seq_strategy() -> impl Strategy<Value = Seq> {
    (0..3usize, 0..28usize, prop::collection::vec(0..3u32, 0..6)).prop_map(|(base, keep, tail)| Seq {
        base,
        keep,
        tail,
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => seq_strategy().prop_map(Op::Insert),
        3 => (seq_strategy(), any::<bool>()).prop_map(|(seq, keep_lock)| Op::Extend { seq, keep_lock }),
        3 => seq_strategy().prop_map(Op::Match),
        1 => seq_strategy().prop_map(Op::Lock),
        2 => any::<usize>().prop_map(Op::Unlock),
        1 => seq_strategy().prop_map(Op::Pin),
        1 => any::<usize>().prop_map(Op::Unpin),
        2 => (0..12usize).prop_map(Op::Evict),
        1 => Just(Op::Clear),
    ]
}

/// A lock or pin the test holds: the node and the tokens it ends after.
#[derive(Debug, Clone)]
struct Hold {
    node: NodeId,
    tokens: Vec<u32>,
}

struct Entry {
    page: u32,
    last_access: u64,
}

struct Harness {
    page_size: usize,
    tree: RadixTree<u32>,
    pool: PageAllocator,
    /// Every cached prefix (a whole number of pages) → its last page.
    model: HashMap<Vec<u32>, Entry>,
    clock: u64,
    locks: Vec<Hold>,
    pins: Vec<Hold>,
}

impl Harness {
    fn new(page_size: usize) -> Self {
        Self {
            page_size,
            tree: RadixTree::new(page_size, PageHash::root(FINGERPRINT)).unwrap(),
            pool: PageAllocator::new(POOL_PAGES),
            model: HashMap::new(),
            clock: 0,
            locks: Vec::new(),
            pins: Vec::new(),
        }
    }

    fn whole_pages<'a>(&self, tokens: &'a [u32]) -> &'a [u32] {
        &tokens[..tokens.len() - tokens.len() % self.page_size]
    }

    fn is_protected(&self, prefix: &[u32]) -> bool {
        self.locks.iter().chain(&self.pins).any(|hold| hold.tokens.starts_with(prefix))
    }

    fn do_match(&mut self, tokens: &[u32]) -> PrefixMatch<u32> {
        let found = self.tree.match_prefix(tokens);
        self.clock += 1;
        let mut want_pages = Vec::new();
        for end in (self.page_size..=tokens.len()).step_by(self.page_size) {
            let Some(entry) = self.model.get_mut(&tokens[..end]) else { break };
            entry.last_access = self.clock;
            want_pages.push(entry.page);
        }
        let want_tokens = want_pages.len() * self.page_size;
        assert_eq!((found.n_tokens, &found.pages), (want_tokens, &want_pages), "match of {tokens:?}");
        let want_hashes = chain_pages(PageHash::root(FINGERPRINT), &tokens[..want_tokens], self.page_size);
        assert_eq!(found.hashes, want_hashes, "hashes of the match of {tokens:?}");
        found
    }

    /// Inserts like a caller: frees the returned duplicates into the pool.
    fn do_insert(&mut self, tokens: &[u32], pages: &[u32]) -> InsertResult<u32> {
        let inserted = self.tree.insert(tokens, pages).unwrap();
        self.clock += 1;
        let mut want_duplicates = Vec::new();
        for (i, &page) in pages.iter().enumerate() {
            let prefix = tokens[..(i + 1) * self.page_size].to_vec();
            let entry = self.model.entry(prefix).or_insert(Entry { page, last_access: 0 });
            entry.last_access = self.clock;
            if entry.page != page {
                want_duplicates.push(page);
            }
        }
        assert_eq!(
            inserted.duplicates, want_duplicates,
            "duplicates of the insert of {tokens:?} with {pages:?}"
        );
        self.pool.free(&inserted.duplicates).unwrap();
        inserted
    }

    /// Checks pages the tree evicted (asked for `wanted`) against the model, frees them, and
    /// checks every held sequence is still wholly cached.
    fn take_evicted(&mut self, freed: Vec<u32>, wanted: usize) {
        let by_page: HashMap<u32, Vec<u32>> =
            self.model.iter().map(|(prefix, e)| (e.page, prefix.clone())).collect();
        let mut seen = HashSet::new();
        let mut evicted_access = 0;
        for page in &freed {
            assert!(seen.insert(*page), "page {page} evicted twice in one call");
            let prefix = by_page.get(page).unwrap_or_else(|| panic!("evicted page {page} is not cached"));
            assert!(!self.is_protected(prefix), "evicted page {page} of {prefix:?} is locked or pinned");
            evicted_access = evicted_access.max(self.model.remove(prefix).unwrap().last_access);
        }
        for prefix in self.model.keys() {
            for end in (self.page_size..prefix.len()).step_by(self.page_size) {
                assert!(
                    self.model.contains_key(&prefix[..end]),
                    "{prefix:?} stayed cached but its prefix went"
                );
            }
        }
        let remaining: Vec<u64> = self
            .model
            .iter()
            .filter(|(prefix, _)| !self.is_protected(prefix))
            .map(|(_, e)| e.last_access)
            .collect();
        if let Some(oldest_kept) = remaining.iter().min() {
            assert!(
                evicted_access <= *oldest_kept,
                "evicted a page used at {evicted_access}, kept one used at {oldest_kept}"
            );
            assert!(
                freed.len() >= wanted,
                "evicted {} of {wanted} pages though some remain evictable",
                freed.len()
            );
        }
        self.pool.free(&freed).unwrap();
        for hold in self.locks.clone().iter().chain(&self.pins.clone()) {
            assert_eq!(self.do_match(&hold.tokens).n_tokens, hold.tokens.len(), "held {hold:?} lost pages");
        }
    }

    /// `n` fresh pages, evicting for them as the engine would; `None` if the cache is too
    /// protected to make room.
    fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if self.pool.n_free() < n {
            let short = n - self.pool.n_free();
            let freed = self.tree.evict(short);
            self.take_evicted(freed, short);
        }
        self.pool.alloc(n)
    }

    fn apply(&mut self, op: Op, bases: &[Vec<u32>]) {
        let tokens_of = |seq: &Seq| {
            let base = &bases[seq.base % bases.len()];
            let mut tokens = base[..seq.keep.min(base.len())].to_vec();
            tokens.extend(&seq.tail);
            tokens
        };
        let is_lock = matches!(op, Op::Lock(_));
        match op {
            Op::Insert(seq) => {
                let tokens = tokens_of(&seq);
                let tokens = self.whole_pages(&tokens);
                if let Some(pages) = self.alloc(tokens.len() / self.page_size) {
                    self.do_insert(tokens, &pages);
                }
            }
            Op::Extend { seq, keep_lock } => {
                let tokens = tokens_of(&seq);
                let tokens = self.whole_pages(&tokens).to_vec();
                let found = self.do_match(&tokens);
                self.tree.lock(found.node).unwrap();
                self.locks.push(Hold { node: found.node, tokens: tokens[..found.n_tokens].to_vec() });
                if let Some(new_pages) = self.alloc(tokens.len() / self.page_size - found.pages.len()) {
                    let pages = [found.pages, new_pages].concat();
                    let inserted = self.do_insert(&tokens, &pages);
                    assert!(inserted.duplicates.is_empty(), "matched and fresh pages are never duplicates");
                    if keep_lock {
                        self.tree.lock(inserted.node).unwrap();
                        self.locks.push(Hold { node: inserted.node, tokens: tokens.clone() });
                    }
                }
                self.tree.unlock(found.node).unwrap();
                let released = self.locks.iter().position(|hold| hold.node == found.node).unwrap();
                self.locks.remove(released);
            }
            Op::Match(seq) => {
                self.do_match(&tokens_of(&seq));
            }
            Op::Lock(seq) | Op::Pin(seq) => {
                let tokens = tokens_of(&seq);
                let found = self.do_match(&tokens);
                let hold = Hold { node: found.node, tokens: tokens[..found.n_tokens].to_vec() };
                if is_lock {
                    self.tree.lock(found.node).unwrap();
                    self.locks.push(hold);
                } else {
                    self.tree.pin(found.node).unwrap();
                    self.pins.push(hold);
                }
            }
            Op::Unlock(i) if !self.locks.is_empty() => {
                let hold = self.locks.remove(i % self.locks.len());
                self.tree.unlock(hold.node).unwrap();
            }
            Op::Unpin(i) if !self.pins.is_empty() => {
                let hold = self.pins.remove(i % self.pins.len());
                self.tree.unpin(hold.node).unwrap();
            }
            Op::Unlock(_) | Op::Unpin(_) => {}
            Op::Evict(n) => {
                let freed = self.tree.evict(n);
                self.take_evicted(freed, n);
            }
            Op::Clear => {
                let freed = self.tree.clear();
                self.pins.clear();
                self.take_evicted(freed, usize::MAX);
            }
        }
    }

    fn check_accounting(&self) {
        let stats = self.tree.stats();
        let count = |held: &[Hold]| {
            self.model.keys().filter(|prefix| held.iter().any(|hold| hold.tokens.starts_with(prefix))).count()
        };
        let evictable = self.model.keys().filter(|prefix| !self.is_protected(prefix)).count();
        assert_eq!(stats.cached_pages, self.model.len(), "{stats:?}");
        assert_eq!(self.tree.cached_pages(), self.model.len());
        assert_eq!((stats.evictable_pages, self.tree.evictable_pages()), (evictable, evictable), "{stats:?}");
        assert_eq!(stats.locked_pages, count(&self.locks), "{stats:?}");
        assert_eq!(stats.pinned_pages, count(&self.pins), "{stats:?}");
        assert!(stats.nodes <= stats.cached_pages, "a node without pages: {stats:?}");
        assert_eq!(self.pool.n_free() + stats.cached_pages, POOL_PAGES as usize, "pages leaked: {stats:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn tree_agrees_with_naive_model(
        page_size in 1..=4usize,
        bases in prop::collection::vec(prop::collection::vec(0..3u32, 0..28), 3),
        ops in prop::collection::vec(op_strategy(), 1..80),
    ) {
        let mut harness = Harness::new(page_size);
        for op in ops {
            harness.apply(op, &bases);
            harness.check_accounting();
        }
        // Releasing every hold makes everything evictable, and eviction gives it all back.
        for hold in std::mem::take(&mut harness.locks) {
            harness.tree.unlock(hold.node).unwrap();
        }
        for hold in std::mem::take(&mut harness.pins) {
            harness.tree.unpin(hold.node).unwrap();
        }
        let freed = harness.tree.evict(usize::MAX);
        harness.take_evicted(freed, usize::MAX);
        prop_assert_eq!(harness.tree.stats(), Default::default());
        prop_assert_eq!(harness.pool.n_free(), POOL_PAGES as usize);
    }
}
