//! The free list of KV page ids. Pages hold no data here; the GPU pool (or a host pool) owns
//! the memory and this decides which ids are in use.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("page {page} freed, but the pool has only {capacity} pages")]
    OutOfRange { page: u32, capacity: u32 },
    #[error("page {page} freed twice")]
    DoubleFree { page: u32 },
}

/// Hands out page ids `0..capacity`; tracks which are free so a double free is caught
/// instead of handing one page to two sequences.
#[derive(Debug, Clone)]
pub struct PageAllocator {
    /// Free ids, popped from the end.
    free: Vec<u32>,
    /// Bit `page` set while `page` is free.
    free_bits: Vec<u64>,
    capacity: u32,
}

impl PageAllocator {
    pub fn new(n_pages: u32) -> Self {
        // Kept descending and taken from the end, so a fresh pool hands out ascending ids
        // (readable page tables in logs).
        let mut pool = Self {
            free: (0..n_pages).rev().collect(),
            free_bits: vec![0; (n_pages as usize).div_ceil(64)],
            capacity: n_pages,
        };
        for page in 0..n_pages {
            pool.set_free(page, true);
        }
        pool
    }

    /// `n` pages, or `None` (and nothing taken) when fewer than `n` are free.
    pub fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.free.len() {
            return None;
        }
        let mut pages = self.free.split_off(self.free.len() - n);
        pages.reverse();
        for &page in &pages {
            self.set_free(page, false);
        }
        Some(pages)
    }

    /// Returns `pages` to the pool. All or nothing: on an error no page is freed.
    pub fn free(&mut self, pages: &[u32]) -> Result<(), AllocError> {
        for (i, &page) in pages.iter().enumerate() {
            let error = if page >= self.capacity {
                Some(AllocError::OutOfRange { page, capacity: self.capacity })
            } else if self.is_free(page) {
                Some(AllocError::DoubleFree { page })
            } else {
                None
            };
            if let Some(error) = error {
                for &marked in &pages[..i] {
                    self.set_free(marked, false);
                }
                return Err(error);
            }
            // Marked now, so a page repeated within `pages` is caught as a double free.
            self.set_free(page, true);
        }
        self.free.extend_from_slice(pages);
        Ok(())
    }

    pub fn n_free(&self) -> usize {
        self.free.len()
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn is_free(&self, page: u32) -> bool {
        self.free_bits[page as usize / 64] & (1 << (page % 64)) != 0
    }

    fn set_free(&mut self, page: u32, free: bool) {
        let word = &mut self.free_bits[page as usize / 64];
        if free {
            *word |= 1 << (page % 64);
        } else {
            *word &= !(1 << (page % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_all_or_nothing() {
        let mut pool = PageAllocator::new(70);
        let first = pool.alloc(66).unwrap();
        assert_eq!(first[..3], [0, 1, 2]);
        assert_eq!(pool.alloc(5), None);
        assert_eq!(pool.n_free(), 4);
        let rest = pool.alloc(4).unwrap();
        assert_eq!(rest, [66, 67, 68, 69]);
        assert_eq!(pool.n_free(), 0);
        pool.free(&rest).unwrap();
        pool.free(&first).unwrap();
        assert_eq!(pool.n_free(), 70);
        assert_eq!(pool.capacity(), 70);
    }

    #[test]
    fn double_free_and_foreign_pages_are_errors_that_free_nothing() {
        let mut pool = PageAllocator::new(8);
        let pages = pool.alloc(3).unwrap();
        pool.free(&pages[..1]).unwrap();
        assert_eq!(pool.free(&pages), Err(AllocError::DoubleFree { page: pages[0] }));
        assert_eq!(pool.n_free(), 6);
        assert_eq!(pool.free(&[pages[1], pages[1]]), Err(AllocError::DoubleFree { page: pages[1] }));
        assert_eq!(pool.free(&[8]), Err(AllocError::OutOfRange { page: 8, capacity: 8 }));
        assert_eq!(pool.n_free(), 6);
        assert_eq!(pool.free(&pages[1..]), Ok(()));
        assert_eq!(pool.n_free(), 8);
        assert_eq!(pool.alloc(9), None);
    }
}
