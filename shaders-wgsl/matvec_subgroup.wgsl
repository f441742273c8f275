// matvec_wide with its lanes' sums added by subgroup operations, for native adapters with the
// subgroups feature (gpu/ops/matmul.rs KERNEL_SUBGROUP; WebGPU in wgpu cannot ask for it):
// one subgroupAdd per sum, then each subgroup's total through workgroup memory, in place of
// matvec_wide's six-level tree and its barriers.
@compute @workgroup_size(WIDE_WG)
fn matvec_subgroup(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) n_sg: u32,
) {
    let r0 = linear_group(wid, nwg) * outputs_per_block(WIDE_ROWS);
    if (r0 >= output_rows()) {
        return; // the whole workgroup: r0 is uniform
    }
    let nt = min(params.n_tokens, MAX_TOKENS);
    let sums = wide_lane_sums(r0, nt, lid);
    // Subgroup sg's total of entry e goes to lane_sums[e · WIDE_WG + sg].
    for (var e = 0u; e < WIDE_SUMS; e++) {
        let total = subgroupAdd(sums[e]);
        if (sg_lane == 0u) {
            lane_sums[e * WIDE_WG + sg] = total;
        }
    }
    workgroupBarrier();
    if (lid < WIDE_SUMS) {
        var total = lane_sums[lid * WIDE_WG];
        for (var s = 1u; s < n_sg; s++) {
            total += lane_sums[lid * WIDE_WG + s];
        }
        lane_sums[lid * WIDE_WG] = total;
    }
    workgroupBarrier();
    wide_store(r0, nt, lid);
}
