//! The KV pages in host memory: per layer, K and V of `n_pages` pages of `page_size` token
//! slots, each slot the token's rotated keys (or values) for every KV head, as f16 bits: the
//! layout of the GPU pool, so a page's values and its spill record are the same on both
//! backends. Every write bumps its (layer, page)'s version, by which copies derived from a
//! page (attention's integer keys and values) know whether they still hold.

use half::f16;

pub struct KvPages {
    pub page_size: usize,
    /// KV heads × head dimension: the values of one slot.
    pub kv_dim: usize,
    pub n_pages: usize,
    /// Per layer: (n_pages, page_size, kv_dim) f16 bits.
    k: Vec<Vec<u16>>,
    /// Per layer, as `k`.
    v: Vec<Vec<u16>>,
    /// (layer, page): writes so far.
    versions: Vec<u64>,
}

impl KvPages {
    /// Room for `n_pages` pages of every layer, or an error naming the memory asked for.
    pub fn new(n_layers: usize, kv_dim: usize, page_size: usize, n_pages: usize) -> Result<Self, String> {
        let per_layer = n_pages * page_size * kv_dim;
        let layer = || -> Result<Vec<u16>, String> {
            let mut v = Vec::new();
            v.try_reserve_exact(per_layer).map_err(|_| format!("out of memory for the KV cache ({} MiB)", (2 * n_layers * per_layer * 2) >> 20))?;
            v.resize(per_layer, 0);
            Ok(v)
        };
        let mut k = Vec::with_capacity(n_layers);
        let mut v = Vec::with_capacity(n_layers);
        for _ in 0..n_layers {
            k.push(layer()?);
            v.push(layer()?);
        }
        Ok(Self { page_size, kv_dim, n_pages, k, v, versions: vec![0; n_layers * n_pages] })
    }

    /// Layer `layer`'s keys, (n_pages, page_size, kv_dim) f16 bits.
    pub fn keys(&self, layer: usize) -> &[u16] {
        &self.k[layer]
    }

    /// Layer `layer`'s values, as `keys`.
    pub fn values(&self, layer: usize) -> &[u16] {
        &self.v[layer]
    }

    /// How many times page `page` of layer `layer` has been written.
    pub fn version(&self, layer: usize, page: u32) -> u64 {
        self.versions[layer * self.n_pages + page as usize]
    }

    fn written(&mut self, layer: usize, page: u32) {
        self.versions[layer * self.n_pages + page as usize] += 1;
    }

    /// Index of position `pos`'s slot (its first value) through `pages`.
    #[inline(always)]
    pub fn slot(&self, pages: &[u32], pos: usize) -> usize {
        (pages[pos / self.page_size] as usize * self.page_size + pos % self.page_size) * self.kv_dim
    }

    /// Stores one token's `k` and `v` (kv_dim each) of layer `layer` at position `pos`,
    /// rounded to f16 as the GPU pool stores them.
    pub fn write_token(&mut self, layer: usize, pages: &[u32], pos: usize, k: &[f32], v: &[f32]) {
        let (at, d) = (self.slot(pages, pos), self.kv_dim);
        self.written(layer, pages[pos / self.page_size]);
        for (dst, src) in [(&mut self.k[layer], k), (&mut self.v[layer], v)] {
            for (o, &x) in dst[at..at + d].iter_mut().zip(src) {
                *o = f16::from_f32(x).to_bits();
            }
        }
    }

    /// Values of one page's slice `lk` (layer · 2 + 0 for K, 1 for V): page_size · kv_dim.
    pub fn page_slice(&self, lk: usize, page: u32) -> &[u16] {
        let len = self.page_size * self.kv_dim;
        let layer = if lk % 2 == 0 { &self.k[lk / 2] } else { &self.v[lk / 2] };
        &layer[page as usize * len..(page as usize + 1) * len]
    }

    pub fn page_slice_mut(&mut self, lk: usize, page: u32) -> &mut [u16] {
        self.written(lk / 2, page);
        let len = self.page_size * self.kv_dim;
        let layer = if lk % 2 == 0 { &mut self.k[lk / 2] } else { &mut self.v[lk / 2] };
        &mut layer[page as usize * len..(page as usize + 1) * len]
    }

    /// Copies page `src`'s keys and values, every layer's, into page `dst`.
    pub fn copy_page(&mut self, src: u32, dst: u32) {
        let len = self.page_size * self.kv_dim;
        for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
            layer.copy_within(src as usize * len..(src as usize + 1) * len, dst as usize * len);
        }
        for layer in 0..self.k.len() {
            self.written(layer, dst);
        }
    }

    pub fn slices(&self) -> usize {
        2 * self.k.len()
    }
}
