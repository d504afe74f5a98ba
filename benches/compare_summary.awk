# benches/compare_summary.awk: the tables of benches/compare.sh, from its raw rows
# (target/bench/compare.tsv). Run as: awk -F '\t' -v q=QUIET_CPU -f compare_summary.awk TSV
#
# Columns: 1 size, 2 round, 3 attempt, 4 tool, 5 gso_segs, 6 rx_pps, 7 rx_packets, 8 rx_secs,
# 9 tx_pps, 10 foreign_cpu, 11 busy_cpu, 12 status, 13 busy_cpu_s, 14 pkts_per_cpu_s,
# 15 pkts_per_sink_cpu_s.
# A pair is the runs of one size, round and attempt; ratios are taken within a pair and the
# median of the per-pair ratios over clean pairs is reported (all pairs, marked *, if none is).

function median(arr, n,    i, j, v) {
    for (i = 2; i <= n; i++) { v = arr[i]; for (j = i - 1; j >= 1 && arr[j] > v; j--) arr[j + 1] = arr[j]; arr[j + 1] = v }
    if (n % 2) return arr[(n + 1) / 2]
    return (arr[n / 2] + arr[n / 2 + 1]) / 2
}

# The median of one tool's figure (col: 6 pps, 14 packets per busy CPU-second of both pinned
# CPUs, 15 of the sink's CPU alone).
function tool_cell(size, tool, col,    k, n, nc, all, cl, i) {
    n = 0; nc = 0
    for (i = 1; i <= npair[size]; i++) {
        k = pair[size, i] SUBSEP tool
        if (!(k in ok) || !ok[k]) continue
        all[++n] = val[k, col]; if (clean[k]) cl[++nc] = val[k, col]
    }
    if (nc > 0) return sprintf("%.0f", median(cl, nc))
    if (n > 0) return sprintf("%.0f*", median(all, n))
    return "-"
}

function ratio_cell(size, a, b, col,    ka, kb, n, nc, all, cl, i, lo, hi, src, m) {
    n = 0; nc = 0
    for (i = 1; i <= npair[size]; i++) {
        ka = pair[size, i] SUBSEP a; kb = pair[size, i] SUBSEP b
        if (!(ka in ok) || !(kb in ok) || !ok[ka] || !ok[kb] || val[kb, col] <= 0) continue
        all[++n] = val[ka, col] / val[kb, col]
        if (clean[ka] && clean[kb]) cl[++nc] = val[ka, col] / val[kb, col]
    }
    if (n == 0) return "-"
    if (nc > 0) { m = nc; for (i = 1; i <= nc; i++) src[i] = cl[i] } else { m = n; for (i = 1; i <= n; i++) src[i] = all[i] }
    lo = src[1]; hi = src[1]
    for (i = 2; i <= m; i++) { if (src[i] < lo) lo = src[i]; if (src[i] > hi) hi = src[i] }
    return sprintf("%.2f (%.2f-%.2f) %d/%d%s", median(src, m), lo, hi, nc, n, nc > 0 ? "" : "*")
}

function ratio_row(size, a, b, what) {
    if (!has[size, a] || !has[size, b]) return
    printf "%-6s %-78s %-28s %-28s %-28s\n", size, a " / " b " (" what ")", ratio_cell(size, a, b, 6), ratio_cell(size, a, b, 14), ratio_cell(size, a, b, 15)
}

NR == 1 { next }
$4 ~ /^(ringblast_paced|ringblast_paced_gso|ringblast_balance)$/ { next }
$4 == "baseline_gso" && $5 > 0 { segs[$1] = $5 }
{
    size = $1; p = $1 SUBSEP $2 SUBSEP $3; k = p SUBSEP $4
    if (!(size in nsizeidx)) { nsizeidx[size] = ++nsizes; sizes[nsizes] = size }
    if (!(p in seenpair)) { seenpair[p] = 1; pair[size, ++npair[size]] = p }
    if ($5 > 0) segs[size] = $5
    ok[k] = ($12 == "ok"); val[k, 6] = $6; val[k, 14] = $14; val[k, 15] = $15; clean[k] = ($12 == "ok" && $10 < q)
    has[size, $4] = 1
    if (!($4 in toolidx)) { toolidx[$4] = ++ntools; tools[ntools] = $4 }
    rk = size SUBSEP $2 SUBSEP $3
    if (!(rk in rfor)) { rorder[++nr] = rk; rsize[nr] = size; rround[nr] = $2; rattempt[nr] = $3; rbusymax[rk] = 0; rfor[rk] = 0 }
    if ($10 > rfor[rk]) rfor[rk] = $10
    if ($11 > rbusymax[rk]) rbusymax[rk] = $11
}
END {
    printf "Median per tool (received pps; received packets per busy CPU-second of the two pinned CPUs,\n"
    printf "and of the sink's CPU alone)\n"
    printf "%-6s %-20s %14s %16s %20s\n", "size", "tool", "rx_pps", "pkts_per_cpu_s", "pkts_per_sink_cpu_s"
    for (s = 1; s <= nsizes; s++)
        for (t = 1; t <= ntools; t++)
            if (has[sizes[s], tools[t]])
                printf "%-6s %-20s %14s %16s %20s\n", sizes[s], tools[t], tool_cell(sizes[s], tools[t], 6), tool_cell(sizes[s], tools[t], 14), tool_cell(sizes[s], tools[t], 15)
    printf "\nRatios within a pair: median (min-max) clean/all\n"
    printf "%-6s %-78s %-28s %-28s %-28s\n", "size", "ratio", "rx_pps", "pkts_per_cpu_s", "pkts_per_sink_cpu_s"
    for (s = 1; s <= nsizes; s++) {
        z = sizes[s]
        ratio_row(z, "ringblast", "udp_ref", "default sink vs blocking ref")
        ratio_row(z, "ringblast", "udp_ref_spin", "default sink vs spinning ref")
        ratio_row(z, "ringblast_spin", "udp_ref_spin", "spin vs spin")
        ratio_row(z, "ringblast_inline", "udp_ref_spin", "inline vs spinning ref")
        ratio_row(z, "ringblast_inline", "udp_ref", "inline vs blocking ref")
        ratio_row(z, "ringblast", "udp_ref_rbsend", "sinks alone: default vs blocking ref")
        ratio_row(z, "ringblast_spin", "udp_ref_spin_rbsend", "sinks alone: spin vs spinning ref")
        ratio_row(z, "ringblast_inline", "udp_ref_spin_rbsend", "sinks alone: inline vs spinning ref")
        ratio_row(z, "ringblast", "iperf3", "default sink")
        ratio_row(z, "ringblast", "baseline", "this build vs BASELINE")
        ratio_row(z, "ringblast_gso", "baseline_gso", "this build vs BASELINE, gso" segs[z])
        ratio_row(z, "ringblast_gso", "udp_ref", "gso" segs[z] " vs plain ref")
        ratio_row(z, "ringblast_gso", "udp_ref_gso", "gso" segs[z] " vs ref gso->gro")
        ratio_row(z, "ringblast", "ringblast_read", "ARRIVAL: kernel receive stamps vs --arrival read")
        ratio_row(z, "ringblast_secret", "ringblast", "PROOF: token vs none")
        ratio_row(z, "ringblast_auth", "ringblast", "PROOF: --auth-data tag vs none")
        ratio_row(z, "ringblast_auth", "ringblast_secret", "PROOF: --auth-data tag vs token")
        ratio_row(z, "ringblast_secret_gso", "ringblast_gso", "PROOF: token vs none, gso" segs[z])
        ratio_row(z, "ringblast_auth_gso", "ringblast_gso", "PROOF: --auth-data tag vs none, gso" segs[z])
        ratio_row(z, "ringblast_auth_gso", "ringblast_secret_gso", "PROOF: --auth-data vs token, gso" segs[z])
        ratio_row(z, "ringblast_auth", "udp_ref", "PROOF: --auth-data vs blocking ref")
        ratio_row(z, "ringblast_auth_gso", "udp_ref", "PROOF: --auth-data gso" segs[z] " vs plain ref")
    }
    printf "\n* = no clean pair/run (foreign load >= %s CPU in every one); figure uses all pairs/runs\n", q
    printf "\nForeign CPU load per round (on the two pinned CPUs; max over the round's runs)\n"
    printf "%-6s %-8s %-8s %-12s %-12s\n", "size", "round", "attempt", "foreign_max", "busy_max"
    for (i = 1; i <= nr; i++)
        printf "%-6s %-8s %-8s %-12.2f %-12.2f\n", rsize[i], rround[i], rattempt[i], rfor[rorder[i]], rbusymax[rorder[i]]
}
