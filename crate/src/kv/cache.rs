//! The prefix cache's bookkeeping: which pages hold which tokens, for the radix tree and for
//! each running sequence. Pure Rust over page ids; the engine moves the data on the GPU.
//!
//! A sequence's pages are a prefix of pages owned by the tree (shared, protected by a lock on
//! the tree node that ends them) followed by pages it owns alone (new pages being filled, and
//! the partial last page, which is never shared). A request adopts the longest cached prefix,
//! computes the rest into private pages, and commits its full pages to the tree at the end.

use super::alloc::PageAllocator;
use super::hash::PageHash;
use super::radix::{CachedPage, NodeId, RadixStats, RadixTree};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CacheError {
    #[error("the KV cache budget holds {capacity_tokens} tokens; this request needs {needed_tokens}. Raise the KV budget or shorten the prompt")]
    Full { needed_tokens: usize, capacity_tokens: usize },
}

/// A token sequence whose KV lives in pool pages: `pages` cover `tokens` in order.
#[derive(Debug, Default)]
pub struct Sequence {
    tokens: Vec<u32>,
    pages: Vec<u32>,
    /// How many leading pages belong to the tree.
    shared: usize,
    /// The tree node ending the shared pages, locked while this sequence holds them.
    lock: Option<NodeId>,
}

impl Sequence {
    /// Tokens whose keys and values are cached.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The page table: page ids covering `tokens()` (and any pages reserved past them).
    pub fn pages(&self) -> &[u32] {
        &self.pages
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Records that `tokens` now have their KV written into the sequence's pages.
    pub fn extend(&mut self, tokens: &[u32]) {
        self.tokens.extend_from_slice(tokens);
    }
}

/// Cache occupancy, in pages.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, tsify::Tsify)]
pub struct CacheStats {
    pub page_size: usize,
    pub total_pages: usize,
    pub free_pages: usize,
    pub cached_pages: usize,
    pub evictable_pages: usize,
    pub locked_pages: usize,
    pub pinned_pages: usize,
    pub nodes: usize,
}

pub struct PrefixCache {
    tree: RadixTree<u32>,
    alloc: PageAllocator,
    page_size: usize,
}

impl PrefixCache {
    /// A cache of `n_pages` pages of `page_size` tokens whose page hashes are seeded with the
    /// model fingerprint.
    pub fn new(n_pages: u32, page_size: usize, fingerprint: u128) -> Self {
        let tree = RadixTree::new(page_size, PageHash::root(fingerprint)).expect("page size is positive");
        Self { tree, alloc: PageAllocator::new(n_pages), page_size }
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn capacity_tokens(&self) -> usize {
        self.alloc.capacity() as usize * self.page_size
    }

    /// Points `seq` at the longest cached prefix of `prompt` and returns its length in tokens.
    /// At most `prompt.len() - 1` tokens are reused, so the last one is always computed and
    /// logits come from a real forward pass. The match comes from the tree (whole pages),
    /// extended by `seq`'s own partial last page when its tokens agree with `prompt`.
    pub fn adopt(&mut self, seq: &mut Sequence, prompt: &[u32]) -> usize {
        let limit = prompt.len().saturating_sub(1);
        let own = seq.tokens.iter().zip(&prompt[..limit]).take_while(|(a, b)| a == b).count();
        let m = self.tree.match_prefix(&prompt[..limit]);
        self.tree.lock(m.node).expect("a node just matched is live");
        // The private page right after the match is reusable only if this sequence's shared
        // pages are exactly the match and its own tokens run past it.
        let keep_private = seq.shared == m.pages.len() && own > m.n_tokens && seq.pages.len() > seq.shared;
        let private: Vec<u32> = seq.pages.drain(seq.shared.min(seq.pages.len())..).collect();
        let (kept, freed) = if keep_private { private.split_at(1) } else { private.split_at(0) };
        self.free(freed);
        if let Some(old) = seq.lock.replace(m.node) {
            self.tree.unlock(old).expect("a sequence's lock is held");
        }
        seq.shared = m.pages.len();
        seq.pages = m.pages;
        seq.pages.extend_from_slice(kept);
        // The kept page covers at most one page past the match.
        let reused = if keep_private { own.min(m.n_tokens + self.page_size) } else { m.n_tokens };
        seq.tokens.clear();
        seq.tokens.extend_from_slice(&prompt[..reused]);
        reused
    }

    /// Makes `seq`'s pages cover `len` tokens, evicting least-recently-used cached prefixes if
    /// the pool is short, and returns the evicted pages (already free: their data must be read
    /// by GPU work submitted before any that writes their new owner). Nothing changes when even
    /// eviction cannot make room.
    pub fn reserve(&mut self, seq: &mut Sequence, len: usize) -> Result<Vec<CachedPage<u32>>, CacheError> {
        let need = len.div_ceil(self.page_size).saturating_sub(seq.pages.len());
        if need == 0 {
            return Ok(Vec::new());
        }
        if self.alloc.n_free() + self.tree.evictable_pages() < need {
            return Err(CacheError::Full {
                needed_tokens: len,
                capacity_tokens: (seq.pages.len() + self.alloc.n_free() + self.tree.evictable_pages()) * self.page_size,
            });
        }
        let mut evicted = Vec::new();
        if self.alloc.n_free() < need {
            evicted = self.tree.evict_pages(need - self.alloc.n_free());
            self.free(&evicted.iter().map(|c| c.page).collect::<Vec<_>>());
        }
        let pages = self.alloc.alloc(need).ok_or(CacheError::Full { needed_tokens: len, capacity_tokens: self.capacity_tokens() })?;
        seq.pages.extend(pages);
        Ok(evicted)
    }

    /// Hands `seq`'s full pages to the tree so later requests can reuse them. Pages the tree
    /// already held for the same tokens replace the sequence's copies, which are freed.
    pub fn commit(&mut self, seq: &mut Sequence) {
        let n_full = seq.tokens.len() / self.page_size;
        if n_full <= seq.shared {
            return;
        }
        let tokens = &seq.tokens[..n_full * self.page_size];
        let inserted = self.tree.insert(tokens, &seq.pages[..n_full]).expect("whole pages");
        let m = self.tree.match_prefix(tokens);
        self.tree.lock(m.node).expect("a node just matched is live");
        if let Some(old) = seq.lock.replace(m.node) {
            self.tree.unlock(old).expect("a sequence's lock is held");
        }
        // Only pages the tree now holds become shared; in the (hash-collision) case where it
        // kept fewer, the rest stay private to the sequence.
        let replaced: Vec<u32> =
            inserted.duplicates.iter().copied().filter(|p| !m.pages.contains(p) && seq.pages[..m.pages.len()].contains(p)).collect();
        seq.pages.splice(..m.pages.len(), m.pages.iter().copied());
        seq.shared = m.pages.len();
        self.free(&replaced);
    }

    /// A second sequence holding `seq`'s tokens: sharing its shared pages and with fresh pages
    /// in place of its own, whose data the caller copies (the (source, destination) pairs
    /// returned). Also returns the pages evicted for them, as [`reserve`](Self::reserve) does.
    /// Nothing changes when the pool cannot hold them.
    #[allow(clippy::type_complexity)]
    pub fn fork(&mut self, seq: &Sequence) -> Result<(Sequence, Vec<(u32, u32)>, Vec<CachedPage<u32>>), CacheError> {
        let mut twin = Sequence { tokens: seq.tokens.clone(), pages: seq.pages[..seq.shared].to_vec(), shared: seq.shared, lock: seq.lock };
        if let Some(node) = seq.lock {
            self.tree.lock(node).expect("a sequence's lock is live");
        }
        let evicted = match self.reserve(&mut twin, seq.pages.len() * self.page_size) {
            Ok(evicted) => evicted,
            Err(e) => {
                self.release(&mut twin);
                return Err(e);
            }
        };
        let copies = seq.pages[seq.shared..].iter().copied().zip(twin.pages[seq.shared..].iter().copied()).collect();
        Ok((twin, copies, evicted))
    }

    /// Drops a sequence: unlocks its shared prefix (which stays cached) and frees its own pages.
    pub fn release(&mut self, seq: &mut Sequence) {
        let private: Vec<u32> = seq.pages.drain(seq.shared.min(seq.pages.len())..).collect();
        self.free(&private);
        if let Some(node) = seq.lock.take() {
            self.tree.unlock(node).expect("a sequence's lock is held");
        }
        *seq = Sequence::default();
    }

    /// Pins the cached whole-page prefix of `tokens` (a system prompt, a tool schema) so it is
    /// never evicted; returns the pinned length in tokens.
    pub fn pin(&mut self, tokens: &[u32]) -> usize {
        let m = self.tree.match_prefix(tokens);
        if m.n_tokens > 0 {
            self.tree.pin(m.node).expect("a node just matched is live");
        }
        m.n_tokens
    }

    /// Undoes one `pin` of the same tokens; false if they were not pinned.
    pub fn unpin(&mut self, tokens: &[u32]) -> bool {
        let m = self.tree.match_prefix(tokens);
        m.n_tokens > 0 && self.tree.unpin(m.node).is_ok()
    }

    /// Evicts every cached prefix no running sequence holds, pinned ones included, and returns
    /// the evicted pages (already free, as from [`reserve`](Self::reserve)).
    pub fn clear(&mut self) -> Vec<CachedPage<u32>> {
        let evicted = self.tree.clear_pages();
        self.free(&evicted.iter().map(|c| c.page).collect::<Vec<_>>());
        evicted
    }

    /// Cached pages whose hash passes `want` (for writing them ahead to the spill tier).
    pub fn cached_pages_where(&self, want: impl Fn(PageHash) -> bool) -> Vec<CachedPage<u32>> {
        self.tree.cached_pages_where(want)
    }

    /// The hash chains start from (the model fingerprint).
    pub fn root_hash(&self) -> PageHash {
        self.tree.root_hash()
    }

    pub fn stats(&self) -> CacheStats {
        let RadixStats { nodes, cached_pages, evictable_pages, locked_pages, pinned_pages } = self.tree.stats();
        CacheStats {
            page_size: self.page_size,
            total_pages: self.alloc.capacity() as usize,
            free_pages: self.alloc.n_free(),
            cached_pages,
            evictable_pages,
            locked_pages,
            pinned_pages,
            nodes,
        }
    }

    fn free(&mut self, pages: &[u32]) {
        // Every page is owned once, by the tree or by one sequence: a failure is a bug.
        self.alloc.free(pages).expect("pages are allocated and owned once");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 4;

    fn cache(n_pages: u32) -> PrefixCache {
        PrefixCache::new(n_pages, PS, 42)
    }

    /// Runs one request the way the engine does: adopt, reserve, "compute", commit.
    fn request(c: &mut PrefixCache, seq: &mut Sequence, prompt: &[u32]) -> Result<usize, CacheError> {
        let reused = c.adopt(seq, prompt);
        c.reserve(seq, prompt.len())?;
        seq.extend(&prompt[reused..]);
        c.commit(seq);
        Ok(reused)
    }

    fn accounted(c: &PrefixCache, private: usize) -> bool {
        let s = c.stats();
        s.free_pages + s.cached_pages + private == s.total_pages
    }

    #[test]
    fn a_second_request_reuses_whole_pages_and_recomputes_the_last_token() {
        let mut c = cache(16);
        let prompt: Vec<u32> = (0..10).collect();
        let mut a = Sequence::default();
        assert_eq!(request(&mut c, &mut a, &prompt).unwrap(), 0);
        c.release(&mut a);
        let mut b = Sequence::default();
        // 10 tokens: two whole pages (8 tokens) are cached; the partial third page is not.
        assert_eq!(request(&mut c, &mut b, &prompt).unwrap(), 8);
        // Exactly the cached prompt: still recomputes its last token.
        let eight: Vec<u32> = (0..8).collect();
        let mut d = Sequence::default();
        assert_eq!(c.adopt(&mut d, &eight), 4);
        c.release(&mut b);
        c.release(&mut d);
        assert!(accounted(&c, 0));
    }

    #[test]
    fn a_fork_shares_whole_pages_and_copies_the_partial_one() {
        let mut c = cache(5);
        let prompt: Vec<u32> = (0..10).collect();
        let mut a = Sequence::default();
        request(&mut c, &mut a, &prompt).unwrap();
        let (mut b, copies, evicted) = c.fork(&a).unwrap();
        assert_eq!(b.tokens(), a.tokens());
        assert_eq!(b.pages()[..2], a.pages()[..2]);
        assert_eq!(copies, vec![(a.pages()[2], b.pages()[2])]);
        assert!(evicted.is_empty());
        // Five pages: two shared and three partial ones fill the pool; one more fork fails
        // and changes nothing.
        let (mut d, _, _) = c.fork(&a).unwrap();
        assert_eq!(c.stats().free_pages, 0);
        assert!(matches!(c.fork(&a), Err(CacheError::Full { .. })));
        assert_eq!(c.stats().free_pages, 0);
        for s in [&mut a, &mut b, &mut d] {
            c.release(s);
        }
        assert!(accounted(&c, 0));
        assert_eq!(c.stats().locked_pages, 0);
    }

    #[test]
    fn a_sequence_keeps_its_own_partial_page_across_turns() {
        let mut c = cache(16);
        let mut s = Sequence::default();
        let turn1: Vec<u32> = (0..10).collect();
        request(&mut c, &mut s, &turn1).unwrap();
        let turn2: Vec<u32> = (0..14).collect();
        // The private third page (tokens 8, 9) is reused too: only 10..14 are new.
        assert_eq!(request(&mut c, &mut s, &turn2).unwrap(), 10);
        assert_eq!(s.pages().len(), 4);
        c.release(&mut s);
        assert!(accounted(&c, 0));
    }

    #[test]
    fn branches_share_pages_and_a_full_pool_evicts_the_least_recent() {
        let mut c = cache(6);
        let base: Vec<u32> = (0..8).collect();
        let branch = |tail: u32| -> Vec<u32> { base.iter().copied().chain([tail, tail, tail, tail, 0]).collect() };
        let mut s1 = Sequence::default();
        request(&mut c, &mut s1, &branch(100)).unwrap();
        let mut s2 = Sequence::default();
        assert_eq!(request(&mut c, &mut s2, &branch(200)).unwrap(), 8);
        assert_eq!(&s1.pages()[..2], &s2.pages()[..2], "the shared prefix is the same pages");
        c.release(&mut s1);
        c.release(&mut s2);
        // Two shared pages plus one per branch.
        assert_eq!(c.stats().cached_pages, 4);
        // A 20-token request needs 5 pages: the least recently used branch is evicted.
        let mut s3 = Sequence::default();
        let other: Vec<u32> = (500..520).collect();
        request(&mut c, &mut s3, &other).unwrap();
        let mut probe = Sequence::default();
        assert!(c.adopt(&mut probe, &branch(200)) <= 8, "a branch must have been evicted");
        c.release(&mut probe);
        c.release(&mut s3);
        assert!(accounted(&c, 0));
    }

    #[test]
    fn a_request_that_cannot_fit_fails_and_leaves_the_cache_intact() {
        let mut c = cache(4);
        let pinned: Vec<u32> = (0..8).collect();
        let mut s = Sequence::default();
        request(&mut c, &mut s, &pinned).unwrap();
        c.release(&mut s);
        assert_eq!(c.pin(&pinned), 8);
        let mut big = Sequence::default();
        let too_long: Vec<u32> = (100..112).collect();
        let err = request(&mut c, &mut big, &too_long).unwrap_err();
        assert_eq!(err, CacheError::Full { needed_tokens: 12, capacity_tokens: 8 });
        c.release(&mut big);
        let mut again = Sequence::default();
        assert_eq!(c.adopt(&mut again, &(0..9).collect::<Vec<u32>>()), 8, "the pinned prefix survived");
        c.release(&mut again);
        assert!(accounted(&c, 0));
    }

    #[test]
    fn a_reservation_that_cannot_fit_evicts_nothing() {
        // Regression: a reservation evicted every evictable prefix before finding that the pool
        // was still short, losing them for nothing.
        let mut c = cache(4);
        let mut s = Sequence::default();
        request(&mut c, &mut s, &(0..8).collect::<Vec<u32>>()).unwrap();
        c.release(&mut s);
        let mut big = Sequence::default();
        assert!(c.reserve(&mut big, 20).is_err());
        assert_eq!(c.stats().cached_pages, 2, "the cached prefix is still there");
        let evicted = c.reserve(&mut big, 12).unwrap();
        // One page short: the leaf goes whole, both its pages, each with its tokens.
        let tokens: Vec<Vec<u32>> = evicted.iter().map(|e| e.tokens.clone()).collect();
        assert_eq!(tokens, vec![(0..4).collect::<Vec<u32>>(), (4..8).collect()]);
        c.release(&mut big);
        assert!(accounted(&c, 0));
    }
}
