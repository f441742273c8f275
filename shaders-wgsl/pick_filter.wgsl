// Shared by the greedy pick and top-k (top2.wgsl, topk.wgsl): the ids a pick skips, from the
// kernel's `banned` binding (the end-of-sequence tokens under ignore_eos) and, under a grammar,
// its `allowed` bitmask (bit i % 32 of word i / 32 set where id i may come next).

/// Whether id i is among the first n_banned of `banned`, or, when `masked`, clear in `allowed`.
fn skipped(i: u32, n_banned: u32, masked: u32) -> bool {
    if (masked != 0u && ((allowed[i >> 5u] >> (i & 31u)) & 1u) == 0u) {
        return true;
    }
    for (var b = 0u; b < n_banned; b++) {
        if (banned[b] == i) {
            return true;
        }
    }
    return false;
}
