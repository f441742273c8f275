//! Chained page hashes: `h_i = xxh3_128(h_{i-1} ‖ tokens of page i)`, with `h_0` the model
//! fingerprint, so a hash names a page *and* everything before it, for this model only.
//! Hashes index the radix tree's children and key spill records; a match still compares the
//! token ids themselves, so a collision can cost a cache hit but never a wrong answer.

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// Seed of the xxh3 call, versioning the byte layout below: changing the layout must change it,
/// or spill records written by an older build would be looked up under the wrong pages.
const CHAIN_FORMAT_SEED: u64 = 1;

/// The chained hash of a page (or, for [`PageHash::root`], of the empty prefix).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageHash(pub u128);

impl PageHash {
    /// The hash of the empty prefix: the model fingerprint, so that two models never share a
    /// chain even for identical token ids.
    pub fn root(fingerprint: u128) -> PageHash {
        PageHash(fingerprint)
    }
}

impl std::fmt::Debug for PageHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageHash({:032x})", self.0)
    }
}

/// The hash of the page holding `tokens`, following the page whose hash is `parent`.
/// Bytes hashed: `parent` (16 bytes, little-endian), then each token id (4 bytes, little-endian).
pub fn chain(parent: PageHash, tokens: &[u32]) -> PageHash {
    let mut bytes = Vec::with_capacity(16 + 4 * tokens.len());
    bytes.extend_from_slice(&parent.0.to_le_bytes());
    for token in tokens {
        bytes.extend_from_slice(&token.to_le_bytes());
    }
    PageHash(xxh3_128_with_seed(&bytes, CHAIN_FORMAT_SEED))
}

/// The hashes of consecutive whole pages of `tokens` after `parent`; a partial last page is
/// not hashed (it is never cached).
pub fn chain_pages(parent: PageHash, tokens: &[u32], page_size: usize) -> Vec<PageHash> {
    let mut hashes = Vec::with_capacity(tokens.len() / page_size);
    let mut previous = parent;
    for page in tokens.chunks_exact(page_size) {
        previous = chain(previous, page);
        hashes.push(previous);
    }
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_prefixes_give_identical_chains() {
        let root = PageHash::root(0xfeed);
        let a = chain_pages(root, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 4);
        let b = chain_pages(root, &[1, 2, 3, 4, 5, 6, 7, 8, 0], 4);
        assert_eq!(a.len(), 2, "the partial last page is not hashed");
        assert_eq!(a, b);
        assert_eq!(a[1], chain(chain(root, &[1, 2, 3, 4]), &[5, 6, 7, 8]));
    }

    #[test]
    fn fingerprint_and_history_change_the_hash() {
        let page = [10, 11, 12, 13];
        let one = chain(PageHash::root(1), &page);
        assert_ne!(one, chain(PageHash::root(2), &page), "another model's fingerprint");
        let after_a = chain(chain(PageHash::root(1), &[1, 1, 1, 1]), &page);
        let after_b = chain(chain(PageHash::root(1), &[1, 1, 1, 2]), &page);
        assert_ne!(after_a, after_b, "the same page after a different prefix");
        assert_ne!(one, chain(PageHash::root(1), &[13, 12, 11, 10]), "token order");
    }

    #[test]
    fn token_ids_are_hashed_as_little_endian_u32() {
        let root = PageHash::root(7);
        let mut bytes = 7u128.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0x04, 0x03, 0x02, 0x01]);
        assert_eq!(chain(root, &[0x0102_0304]).0, xxh3_128_with_seed(&bytes, CHAIN_FORMAT_SEED));
    }
}
