//! The prefix cache: a radix tree over token ids whose edges hold runs of whole pages.
//!
//! Generic over the page handle `P` (a GPU page id, a host page, ...) and free of any GPU type,
//! so any backend reuses the same cache logic. The tree never allocates or frees pages: it
//! hands pages back (duplicates from `insert`, victims from `evict`) and the caller returns them
//! to its allocator.
//!
//! Protection is two reference counts per node, each counting holds at the node or below it:
//! locks (pages a running sequence reads) and pins (prefixes the user wants kept). A node with
//! neither is evictable; only evictable leaves are taken, least recently used first, and a
//! parent becomes a leaf (and a candidate) when its last child goes. Since a hold counts on
//! every ancestor, a locked or pinned node's whole path to the root stays matchable.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;

use thiserror::Error;

use super::hash::{chain, chain_pages, PageHash};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RadixError {
    #[error("page_size must be at least 1 token")]
    ZeroPageSize,
    #[error(
        "insert of {n_tokens} tokens with {n_pages} pages: expected exactly {n_pages} pages of \
         page_size {page_size} tokens"
    )]
    TokensNotWholePages { n_tokens: usize, n_pages: usize, page_size: usize },
    #[error("{node:?} is no longer in the tree (evicted or cleared)")]
    StaleNode { node: NodeId },
    #[error("unlock of {node:?}, which holds no lock")]
    NotLocked { node: NodeId },
    #[error("unpin of {node:?}, which is not pinned")]
    NotPinned { node: NodeId },
}

/// A node of the tree. The generation makes an id of an evicted node stale instead of letting
/// it name whichever node reuses the slot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NodeId {
    index: u32,
    generation: u32,
}

/// The cached part of a token sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMatch<P> {
    /// The pages holding the first `n_tokens` tokens, in order.
    pub pages: Vec<P>,
    /// The chained hash of each of those pages.
    pub hashes: Vec<PageHash>,
    /// Tokens matched: a multiple of the page size (a partial last page never matches).
    pub n_tokens: usize,
    /// The node ending exactly after `n_tokens` tokens (the root when nothing matched): lock it
    /// to keep these pages while they are read.
    pub node: NodeId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertResult<P> {
    /// The node ending exactly after the inserted tokens.
    pub node: NodeId,
    /// Offered pages the tree did not take, in sequence order, for the caller to free: those
    /// whose tokens were already cached under another page (an offered page that *is* the
    /// cached page is not returned), and, after a 128-bit hash collision with different
    /// tokens, every page from there on.
    pub duplicates: Vec<P>,
}

/// A cached page with what names it: handed out by eviction (so the page can be spilled before
/// it is reused) and by [`RadixTree::cached_pages_where`] (so it can be written ahead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPage<P> {
    pub page: P,
    /// The page's `page_size` tokens.
    pub tokens: Vec<u32>,
    pub hash: PageHash,
    /// The hash of the page before it (the root hash for a first page).
    pub parent: PageHash,
}

/// Page counts over the whole tree. A page both locked and pinned counts in both
/// `locked_pages` and `pinned_pages`; every cached page is evictable or protected by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RadixStats {
    /// Nodes other than the root.
    pub nodes: usize,
    pub cached_pages: usize,
    /// Pages neither locked nor pinned: what `evict(usize::MAX)` would return.
    pub evictable_pages: usize,
    /// Pages on the path of a lock.
    pub locked_pages: usize,
    /// Pages on the path of a pin.
    pub pinned_pages: usize,
}

struct Node<P> {
    /// The edge from the parent: `pages.len() * page_size` tokens (none for the root).
    tokens: Vec<u32>,
    pages: Vec<P>,
    /// Chained hash of each page; `hashes[0]` keys this node in its parent's `children`.
    hashes: Vec<PageHash>,
    parent: Option<NodeId>,
    /// Keyed by the hash of the child's first page; tokens are compared on every lookup.
    children: HashMap<u128, NodeId>,
    /// Locks held on this node or a descendant.
    lock_refs: u32,
    /// Locks held on this node itself, so an unmatched unlock is caught.
    own_locks: u32,
    /// Pins on this node or a descendant.
    pin_refs: u32,
    /// Pins on this node itself.
    own_pins: u32,
    /// Logical time of the last match or insert through this node.
    last_access: u64,
}

impl<P> Node<P> {
    fn is_protected(&self) -> bool {
        self.lock_refs > 0 || self.pin_refs > 0
    }
}

struct Slot<P> {
    generation: u32,
    node: Option<Node<P>>,
}

/// What a node's children offer for the next page of a sequence.
enum Step {
    /// No child starts with this page.
    Absent,
    /// A child has this page's hash but other tokens: a hash collision. Nothing beyond it can
    /// be matched or stored on this path.
    Collision,
    /// The child's first `n_pages` pages hold the same tokens (at least one).
    Shared { child: NodeId, n_pages: usize },
}

pub struct RadixTree<P> {
    page_size: usize,
    root_hash: PageHash,
    slots: Vec<Slot<P>>,
    free_slots: Vec<u32>,
    root: NodeId,
    /// Logical clock for LRU order, advanced by each match and insert.
    clock: u64,
    /// Unprotected leaves other than the root, oldest first.
    evictable_leaves: BTreeSet<(u64, NodeId)>,
    /// Pages in unprotected nodes (leaves or not).
    evictable_pages: usize,
    cached_pages: usize,
}

impl<P: Copy + Eq + Hash + Debug> RadixTree<P> {
    /// An empty tree of pages of `page_size` tokens, whose hash chains start at `root_hash`
    /// (see [`PageHash::root`]).
    pub fn new(page_size: usize, root_hash: PageHash) -> Result<Self, RadixError> {
        if page_size == 0 {
            return Err(RadixError::ZeroPageSize);
        }
        let root_node = Node {
            tokens: Vec::new(),
            pages: Vec::new(),
            hashes: Vec::new(),
            parent: None,
            children: HashMap::new(),
            lock_refs: 0,
            own_locks: 0,
            pin_refs: 0,
            own_pins: 0,
            last_access: 0,
        };
        Ok(Self {
            page_size,
            root_hash,
            slots: vec![Slot { generation: 0, node: Some(root_node) }],
            free_slots: Vec::new(),
            root: NodeId { index: 0, generation: 0 },
            clock: 0,
            evictable_leaves: BTreeSet::new(),
            evictable_pages: 0,
            cached_pages: 0,
        })
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The hash the chains start from, to continue one past a match (the spill tier does).
    pub fn root_hash(&self) -> PageHash {
        self.root_hash
    }

    /// The longest cached prefix of `tokens`, in whole pages. When it ends inside an edge the
    /// edge is split there, so the returned node ends exactly at the match. Marks the matched
    /// path as used now.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> PrefixMatch<P> {
        let now = self.advance_clock();
        let whole = tokens.len() - tokens.len() % self.page_size;
        let mut found = PrefixMatch { pages: Vec::new(), hashes: Vec::new(), n_tokens: 0, node: self.root };
        while found.n_tokens < whole {
            let Step::Shared { child, n_pages } = self.step(found.node, &tokens[found.n_tokens..whole])
            else {
                break;
            };
            let ends_inside = n_pages < self.node(child).pages.len();
            let node_id = if ends_inside { self.split(child, n_pages) } else { child };
            let node = self.node(node_id);
            found.pages.extend_from_slice(&node.pages);
            found.hashes.extend_from_slice(&node.hashes);
            found.n_tokens += n_pages * self.page_size;
            found.node = node_id;
            self.touch(node_id, now);
            if ends_inside {
                break;
            }
        }
        found
    }

    /// Caches `pages` as holding `tokens` (`pages.len()` whole pages). Spans already cached
    /// keep the tree's pages; the caller's pages for them come back in `duplicates`.
    pub fn insert(&mut self, tokens: &[u32], pages: &[P]) -> Result<InsertResult<P>, RadixError> {
        if tokens.len() != pages.len() * self.page_size {
            return Err(RadixError::TokensNotWholePages {
                n_tokens: tokens.len(),
                n_pages: pages.len(),
                page_size: self.page_size,
            });
        }
        let now = self.advance_clock();
        let mut node_id = self.root;
        let mut done = 0;
        let mut duplicates = Vec::new();
        while done < pages.len() {
            let rest = &tokens[done * self.page_size..];
            match self.step(node_id, rest) {
                Step::Absent => {
                    node_id = self.add_leaf(node_id, rest, &pages[done..]);
                    done = pages.len();
                }
                Step::Collision => break,
                Step::Shared { child, n_pages } => {
                    let offered = &pages[done..done + n_pages];
                    let held = &self.node(child).pages[..n_pages];
                    duplicates.extend(offered.iter().zip(held).filter(|(o, h)| o != h).map(|(o, _)| *o));
                    let ends_inside = n_pages < self.node(child).pages.len();
                    node_id = if ends_inside { self.split(child, n_pages) } else { child };
                    done += n_pages;
                }
            }
            self.touch(node_id, now);
        }
        duplicates.extend_from_slice(&pages[done..]);
        Ok(InsertResult { node: node_id, duplicates })
    }

    /// Protects `node` and its path to the root from eviction until the matching `unlock`.
    pub fn lock(&mut self, node: NodeId) -> Result<(), RadixError> {
        self.live_mut(node)?.own_locks += 1;
        self.update_path(node, |n| n.lock_refs += 1);
        Ok(())
    }

    pub fn unlock(&mut self, node: NodeId) -> Result<(), RadixError> {
        let held = self.live_mut(node)?;
        if held.own_locks == 0 {
            return Err(RadixError::NotLocked { node });
        }
        held.own_locks -= 1;
        self.update_path(node, |n| n.lock_refs -= 1);
        Ok(())
    }

    /// Keeps `node` and its path to the root cached until the matching `unpin` (or `clear`).
    pub fn pin(&mut self, node: NodeId) -> Result<(), RadixError> {
        self.live_mut(node)?.own_pins += 1;
        self.update_path(node, |n| n.pin_refs += 1);
        Ok(())
    }

    pub fn unpin(&mut self, node: NodeId) -> Result<(), RadixError> {
        let held = self.live_mut(node)?;
        if held.own_pins == 0 {
            return Err(RadixError::NotPinned { node });
        }
        held.own_pins -= 1;
        self.update_path(node, |n| n.pin_refs -= 1);
        Ok(())
    }

    /// Removes least-recently-used unprotected leaves, whole, until at least `n_pages` pages
    /// are freed or nothing more is evictable; returns their pages for the caller to free.
    pub fn evict(&mut self, n_pages: usize) -> Vec<P> {
        self.evict_pages(n_pages).into_iter().map(|c| c.page).collect()
    }

    /// [`evict`](Self::evict), returning each page with its tokens and hashes.
    pub fn evict_pages(&mut self, n_pages: usize) -> Vec<CachedPage<P>> {
        let mut freed = Vec::new();
        while freed.len() < n_pages {
            let Some((_, leaf)) = self.evictable_leaves.pop_first() else {
                break;
            };
            let parent = self.parent_hash(leaf);
            let node = self.remove_leaf(leaf);
            freed.extend(Self::described(node, parent, self.page_size));
        }
        freed
    }

    /// Every cached page whose hash passes `want`, with its tokens and hashes, each page after
    /// the pages before it (so a prefix of the list is a set of whole chains from the root).
    pub fn cached_pages_where(&self, want: impl Fn(PageHash) -> bool) -> Vec<CachedPage<P>> {
        let mut out = Vec::new();
        let mut stack = vec![self.root];
        while let Some(id) = stack.pop() {
            let node = self.node(id);
            stack.extend(node.children.values().copied());
            let mut parent = self.parent_hash(id);
            for (i, (&hash, page)) in node.hashes.iter().zip(&node.pages).enumerate() {
                if want(hash) {
                    let tokens = node.tokens[i * self.page_size..(i + 1) * self.page_size].to_vec();
                    out.push(CachedPage { page: *page, tokens, hash, parent });
                }
                parent = hash;
            }
        }
        out
    }

    /// Drops every pin, then evicts everything not locked; returns the pages for the caller to
    /// free. Ids of removed nodes become stale.
    pub fn clear(&mut self) -> Vec<P> {
        self.clear_pages().into_iter().map(|c| c.page).collect()
    }

    /// [`clear`](Self::clear), returning each page with its tokens and hashes.
    pub fn clear_pages(&mut self) -> Vec<CachedPage<P>> {
        let pinned: Vec<(NodeId, u32)> = self
            .live_nodes()
            .filter(|(_, node)| node.own_pins > 0)
            .map(|(id, node)| (id, node.own_pins))
            .collect();
        for (id, pins) in pinned {
            self.node_mut(id).own_pins = 0;
            self.update_path(id, |n| n.pin_refs -= pins);
        }
        self.evict_pages(usize::MAX)
    }

    /// Pages `evict(usize::MAX)` would free now.
    pub fn evictable_pages(&self) -> usize {
        self.evictable_pages
    }

    pub fn cached_pages(&self) -> usize {
        self.cached_pages
    }

    /// Counts over the whole tree (a scan: for reports, not for every request).
    pub fn stats(&self) -> RadixStats {
        let mut stats = RadixStats::default();
        for (id, node) in self.live_nodes() {
            if id == self.root {
                continue;
            }
            let pages = node.pages.len();
            stats.nodes += 1;
            stats.cached_pages += pages;
            if !node.is_protected() {
                stats.evictable_pages += pages;
            }
            if node.lock_refs > 0 {
                stats.locked_pages += pages;
            }
            if node.pin_refs > 0 {
                stats.pinned_pages += pages;
            }
        }
        stats
    }

    fn advance_clock(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn live_nodes(&self) -> impl Iterator<Item = (NodeId, &Node<P>)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let id = NodeId { index: index as u32, generation: slot.generation };
            slot.node.as_ref().map(|node| (id, node))
        })
    }

    /// A node named by a caller, who may hold an id that went stale.
    fn live_mut(&mut self, id: NodeId) -> Result<&mut Node<P>, RadixError> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|slot| slot.generation == id.generation)
            .and_then(|slot| slot.node.as_mut())
            .ok_or(RadixError::StaleNode { node: id })
    }

    /// A node the tree itself links to, which is live by construction.
    fn node(&self, id: NodeId) -> &Node<P> {
        let slot = &self.slots[id.index as usize];
        debug_assert_eq!(slot.generation, id.generation, "tree links a stale {id:?}");
        slot.node.as_ref().expect("tree links a removed node")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node<P> {
        let slot = &mut self.slots[id.index as usize];
        debug_assert_eq!(slot.generation, id.generation, "tree links a stale {id:?}");
        slot.node.as_mut().expect("tree links a removed node")
    }

    /// Looks up the child of `parent` continuing with `rest` (at least one whole page).
    fn step(&self, parent: NodeId, rest: &[u32]) -> Step {
        let parent_node = self.node(parent);
        let parent_hash = parent_node.hashes.last().copied().unwrap_or(self.root_hash);
        let first_page = chain(parent_hash, &rest[..self.page_size]);
        let Some(&child) = parent_node.children.get(&first_page.0) else {
            return Step::Absent;
        };
        let n_pages = self
            .node(child)
            .tokens
            .chunks_exact(self.page_size)
            .zip(rest.chunks_exact(self.page_size))
            .take_while(|(held, wanted)| held == wanted)
            .count();
        if n_pages == 0 {
            Step::Collision
        } else {
            Step::Shared { child, n_pages }
        }
    }

    fn add_leaf(&mut self, parent: NodeId, tokens: &[u32], pages: &[P]) -> NodeId {
        let parent_hash = self.node(parent).hashes.last().copied().unwrap_or(self.root_hash);
        let hashes = chain_pages(parent_hash, tokens, self.page_size);
        let key = hashes[0].0;
        let leaf = self.alloc_slot(Node {
            tokens: tokens.to_vec(),
            pages: pages.to_vec(),
            hashes,
            parent: Some(parent),
            children: HashMap::new(),
            lock_refs: 0,
            own_locks: 0,
            pin_refs: 0,
            own_pins: 0,
            last_access: 0,
        });
        self.node_mut(parent).children.insert(key, leaf);
        self.cached_pages += pages.len();
        self.evictable_pages += pages.len();
        self.refresh_evictable(parent);
        self.refresh_evictable(leaf);
        leaf
    }

    /// Cuts `id`'s edge after `n_pages` pages: a new node takes the first part and becomes
    /// `id`'s parent. `id` keeps the deep end, so ids callers hold (locked or pinned) still end
    /// where they did; the new node inherits the hold counts, being on the same paths.
    fn split(&mut self, id: NodeId, n_pages: usize) -> NodeId {
        let page_size = self.page_size;
        let node = self.node_mut(id);
        let tail_tokens = node.tokens.split_off(n_pages * page_size);
        let tail_pages = node.pages.split_off(n_pages);
        let tail_hashes = node.hashes.split_off(n_pages);
        let tail_key = tail_hashes[0].0;
        let top = Node {
            tokens: std::mem::replace(&mut node.tokens, tail_tokens),
            pages: std::mem::replace(&mut node.pages, tail_pages),
            hashes: std::mem::replace(&mut node.hashes, tail_hashes),
            parent: node.parent,
            children: HashMap::from([(tail_key, id)]),
            lock_refs: node.lock_refs,
            own_locks: 0,
            pin_refs: node.pin_refs,
            own_pins: 0,
            last_access: node.last_access,
        };
        let (parent, key) = (top.parent.expect("the root is never split"), top.hashes[0].0);
        let top_id = self.alloc_slot(top);
        self.node_mut(id).parent = Some(top_id);
        self.node_mut(parent).children.insert(key, top_id);
        top_id
    }

    fn alloc_slot(&mut self, node: Node<P>) -> NodeId {
        match self.free_slots.pop() {
            Some(index) => {
                let slot = &mut self.slots[index as usize];
                slot.node = Some(node);
                NodeId { index, generation: slot.generation }
            }
            None => {
                self.slots.push(Slot { generation: 0, node: Some(node) });
                NodeId { index: (self.slots.len() - 1) as u32, generation: 0 }
            }
        }
    }

    /// The hash of the page before `id`'s first page.
    fn parent_hash(&self, id: NodeId) -> PageHash {
        let parent = self.node(id).parent;
        parent.and_then(|p| self.node(p).hashes.last().copied()).unwrap_or(self.root_hash)
    }

    fn described(node: Node<P>, parent: PageHash, page_size: usize) -> Vec<CachedPage<P>> {
        let mut previous = parent;
        node.pages
            .into_iter()
            .zip(node.hashes)
            .zip(node.tokens.chunks_exact(page_size))
            .map(|((page, hash), tokens)| {
                let parent = std::mem::replace(&mut previous, hash);
                CachedPage { page, tokens: tokens.to_vec(), hash, parent }
            })
            .collect()
    }

    /// Unlinks an evictable leaf (already out of `evictable_leaves`) and returns it.
    fn remove_leaf(&mut self, id: NodeId) -> Node<P> {
        let slot = &mut self.slots[id.index as usize];
        let node = slot.node.take().expect("evictable leaf is live");
        slot.generation += 1;
        self.free_slots.push(id.index);
        let parent = node.parent.expect("the root is never evictable");
        self.node_mut(parent).children.remove(&node.hashes[0].0);
        self.cached_pages -= node.pages.len();
        self.evictable_pages -= node.pages.len();
        self.refresh_evictable(parent);
        node
    }

    /// Applies a hold-count change to `id` and each ancestor, keeping the evictable page count
    /// and leaf set in step with each node's protection.
    fn update_path(&mut self, id: NodeId, change: impl Fn(&mut Node<P>)) {
        let mut current = Some(id);
        while let Some(id) = current {
            let node = self.node_mut(id);
            let was_protected = node.is_protected();
            change(node);
            let (is_protected, pages) = (node.is_protected(), node.pages.len());
            current = node.parent;
            match (was_protected, is_protected) {
                (true, false) => self.evictable_pages += pages,
                (false, true) => self.evictable_pages -= pages,
                _ => {}
            }
            self.refresh_evictable(id);
        }
    }

    fn touch(&mut self, id: NodeId, now: u64) {
        let node = self.node_mut(id);
        let before = node.last_access;
        node.last_access = now;
        self.evictable_leaves.remove(&(before, id));
        self.refresh_evictable(id);
    }

    /// Puts `id` in the evictable-leaf set or takes it out; the set's entry for a node is always
    /// keyed by its current `last_access`.
    fn refresh_evictable(&mut self, id: NodeId) {
        if id == self.root {
            return;
        }
        let node = self.node(id);
        let key = (node.last_access, id);
        if node.children.is_empty() && !node.is_protected() {
            self.evictable_leaves.insert(key);
        } else {
            self.evictable_leaves.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> RadixTree<u32> {
        RadixTree::new(4, PageHash::root(0x5eed)).unwrap()
    }

    fn seq(n: u32) -> Vec<u32> {
        (0..n).collect()
    }

    #[test]
    fn match_ending_inside_an_edge_splits_it_there() {
        let mut t = tree();
        let inserted = t.insert(&seq(12), &[10, 11, 12]).unwrap();
        assert_eq!(t.stats().nodes, 1);
        let mut query = seq(8);
        query.extend([99, 99, 99, 99]);
        let found = t.match_prefix(&query);
        assert_eq!((found.n_tokens, found.pages.clone()), (8, vec![10, 11]));
        assert_eq!(t.stats().nodes, 2, "the edge is split after its second page");
        assert_ne!(found.node, inserted.node, "the inserted id keeps the deep end");
        // Locking the split point protects two pages, the deep end stays evictable.
        t.lock(found.node).unwrap();
        assert_eq!(t.evict(usize::MAX), vec![12]);
        assert_eq!(t.match_prefix(&seq(12)).pages, vec![10, 11]);
        assert_eq!(t.unlock(inserted.node), Err(RadixError::StaleNode { node: inserted.node }));
    }

    #[test]
    fn partial_last_page_never_matches() {
        let mut t = tree();
        t.insert(&seq(8), &[1, 2]).unwrap();
        let found = t.match_prefix(&seq(7));
        assert_eq!((found.n_tokens, found.pages), (4, vec![1]));
        assert_eq!(t.match_prefix(&seq(3)).n_tokens, 0);
        assert_eq!(t.match_prefix(&seq(3)).node, t.root);
    }

    #[test]
    fn insert_returns_the_callers_pages_for_spans_already_cached() {
        let mut t = tree();
        t.insert(&seq(8), &[1, 2]).unwrap();
        let again = t.insert(&seq(16), &[5, 6, 7, 8]).unwrap();
        assert_eq!(again.duplicates, vec![5, 6]);
        assert_eq!(t.match_prefix(&seq(16)).pages, vec![1, 2, 7, 8]);
        // The engine inserts the pages it matched plus new ones: the tree's own pages are not
        // duplicates, or the caller would free pages the tree still holds.
        let extended = t.insert(&seq(20), &[1, 2, 7, 8, 9]).unwrap();
        assert_eq!(extended.duplicates, Vec::<u32>::new());
    }

    #[test]
    fn insert_of_a_prefix_of_an_edge_ends_at_a_split() {
        let mut t = tree();
        t.insert(&seq(12), &[1, 2, 3]).unwrap();
        let prefix = t.insert(&seq(4), &[9]).unwrap();
        assert_eq!(prefix.duplicates, vec![9]);
        t.pin(prefix.node).unwrap();
        assert_eq!(t.evict(usize::MAX), vec![2, 3]);
        assert_eq!(t.stats().pinned_pages, 1);
    }

    #[test]
    fn lru_order_and_parent_becomes_evictable_with_its_last_child() {
        let mut t = tree();
        let mut a = seq(8);
        t.insert(&a, &[1, 2]).unwrap();
        a[4] = 50;
        t.insert(&a, &[1, 3]).unwrap(); // siblings 2 and 3 under page 1
        t.match_prefix(&seq(8)); // page 2's leaf is now the newest
        assert_eq!(t.evict(1), vec![3]);
        assert_eq!(t.evict(1), vec![2]);
        assert_eq!(t.evict(1), vec![1], "the parent went once its last child did");
        assert_eq!(t.evict(1), Vec::<u32>::new());
    }

    #[test]
    fn unlock_and_unpin_without_a_hold_are_errors() {
        let mut t = tree();
        let leaf = t.insert(&seq(8), &[1, 2]).unwrap().node;
        let top = t.match_prefix(&seq(4)).node;
        t.lock(leaf).unwrap();
        // `top` carries the leaf's lock on its path, but holds none itself.
        assert_eq!(t.unlock(top), Err(RadixError::NotLocked { node: top }));
        assert_eq!(t.unpin(leaf), Err(RadixError::NotPinned { node: leaf }));
        t.unlock(leaf).unwrap();
        assert_eq!(t.unlock(leaf), Err(RadixError::NotLocked { node: leaf }));
        assert_eq!(t.evictable_pages(), 2);
    }

    #[test]
    fn clear_drops_pins_and_keeps_locked_paths() {
        let mut t = tree();
        let pinned = t.insert(&seq(8), &[1, 2]).unwrap().node;
        t.pin(pinned).unwrap();
        let mut other = seq(8);
        other[0] = 40;
        let locked = t.insert(&other, &[3, 4]).unwrap().node;
        t.lock(locked).unwrap();
        let mut freed = t.clear();
        freed.sort();
        assert_eq!(freed, vec![1, 2]);
        assert_eq!(t.unpin(pinned), Err(RadixError::StaleNode { node: pinned }));
        assert_eq!(
            t.stats(),
            RadixStats { nodes: 1, cached_pages: 2, evictable_pages: 0, locked_pages: 2, pinned_pages: 0 }
        );
    }

    #[test]
    fn split_of_a_locked_edge_keeps_both_halves_locked() {
        let mut t = tree();
        let leaf = t.insert(&seq(12), &[1, 2, 3]).unwrap().node;
        t.lock(leaf).unwrap();
        t.match_prefix(&seq(4)); // splits the locked edge after its first page
        assert_eq!(t.stats().locked_pages, 3);
        assert_eq!(t.evict(usize::MAX), Vec::<u32>::new());
        t.unlock(leaf).unwrap();
        assert_eq!(t.evictable_pages(), 3);
        assert_eq!(t.evict(usize::MAX), vec![2, 3, 1]);
    }

    #[test]
    fn stale_id_does_not_name_the_node_reusing_its_slot() {
        let mut t = tree();
        let gone = t.insert(&seq(4), &[1]).unwrap().node;
        assert_eq!(t.evict(1), vec![1]);
        let mut other = seq(4);
        other[0] = 9;
        let reused = t.insert(&other, &[2]).unwrap().node;
        assert_eq!(reused.index, gone.index, "the slot is reused");
        assert_eq!(t.lock(gone), Err(RadixError::StaleNode { node: gone }));
        assert_eq!(t.stats().locked_pages, 0);
    }

    #[test]
    fn insert_rejects_tokens_that_are_not_whole_pages() {
        let mut t = tree();
        assert_eq!(
            t.insert(&seq(7), &[1, 2]),
            Err(RadixError::TokensNotWholePages { n_tokens: 7, n_pages: 2, page_size: 4 })
        );
        assert!(RadixTree::<u32>::new(0, PageHash::root(0)).is_err());
    }

    #[test]
    fn hash_collision_costs_a_hit_never_a_wrong_page() {
        let mut t = tree();
        t.insert(&seq(4), &[1]).unwrap();
        // Re-key the child under the hash another page would have: a stand-in for a collision.
        let other_page = [7, 7, 7, 7];
        let root = t.root;
        let child = t.node_mut(root).children.drain().next().unwrap().1;
        let colliding = chain(t.root_hash, &other_page).0;
        t.node_mut(root).children.insert(colliding, child);
        assert_eq!(t.match_prefix(&other_page).n_tokens, 0);
        let stored = t.insert(&other_page, &[2]).unwrap();
        assert_eq!((stored.node, stored.duplicates), (root, vec![2]));
    }

    #[test]
    fn evicted_and_listed_pages_carry_their_tokens_and_chained_hashes() {
        let mut t = tree();
        let tokens = seq(12);
        t.insert(&tokens, &[1, 2, 3]).unwrap();
        // A branch after the first page: its first page's parent is the shared page.
        let branch: Vec<u32> = tokens[..4].iter().copied().chain([90, 91, 92, 93]).collect();
        t.insert(&branch, &[1, 4]).unwrap();
        let hashes = chain_pages(t.root_hash, &tokens, 4);
        let listed = t.cached_pages_where(|h| h != hashes[1]);
        assert_eq!(listed.len(), 3, "four pages, one filtered out");
        let page3 = listed.iter().find(|c| c.page == 3).unwrap();
        assert_eq!((page3.hash, page3.parent, page3.tokens.clone()), (hashes[2], hashes[1], tokens[8..].to_vec()));
        let page4 = listed.iter().find(|c| c.page == 4).unwrap();
        assert_eq!((page4.hash, page4.parent), (chain(hashes[0], &[90, 91, 92, 93]), hashes[0]));

        let evicted = t.evict_pages(usize::MAX);
        let mut pages: Vec<u32> = evicted.iter().map(|c| c.page).collect();
        pages.sort();
        assert_eq!(pages, [1, 2, 3, 4]);
        for c in &evicted {
            assert_eq!(c.hash, chain(c.parent, &c.tokens), "page {}: its hash chains from its parent", c.page);
        }
        assert_eq!(evicted.iter().find(|c| c.page == 1).unwrap().parent, t.root_hash);
    }
}
