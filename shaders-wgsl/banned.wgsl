// Shared by the greedy pick and top-k (top2.wgsl, topk.wgsl): the ids a pick skips, from the
// kernel's `banned` binding (the end-of-sequence tokens under ignore_eos).

/// Whether id i is among the first n_banned of `banned`.
fn is_banned(i: u32, n_banned: u32) -> bool {
    for (var b = 0u; b < n_banned; b++) {
        if (banned[b] == i) {
            return true;
        }
    }
    return false;
}
