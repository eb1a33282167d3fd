# Shared by the forward-pass references: how a reference's logits judge the C++ pass's (.npy),
# and whether greedy decoding from the prompt's incremental state reproduces the oracle's ids.


def check_against(ref, given, full, n, new_state, step, tolerance):
    """0 when `given` [positions, vocab] is within `tolerance` of the largest logit of `ref`,
    has the same argmax at every position, and greedy steps from the first `n` ids of `full`
    (new_state(); step(token, state) -> logits) give the rest of `full`; 1 otherwise."""
    if tuple(given.shape) != tuple(ref.shape):
        print(f"logits: shape {tuple(given.shape)}, expected {tuple(ref.shape)}")
        return 1
    rel = ((given - ref).abs().max() / ref.abs().max()).item()
    print(f"logits: max abs diff / max abs logit = {rel:.3e} (tolerance {tolerance:g})")
    ok = rel <= tolerance
    am_ref, am_given = ref.argmax(-1).tolist(), given.argmax(-1).tolist()
    diff = [i for i in range(len(full)) if am_ref[i] != am_given[i]]
    print(f"argmax: {len(full) - len(diff)}/{len(full)} positions identical"
          + (f" (differ at {diff})" if diff else ""))
    ok &= not diff
    st = new_state()
    for t in full[:n - 1]:
        step(t, st)
    seq, tok = list(full[:n]), full[n - 1]
    while len(seq) < len(full):
        tok = int(step(tok, st).argmax())
        seq.append(tok)
    same = seq == full
    print(f"greedy: {len(full) - n} tokens from the prompt's state "
          + ("identical" if same else f"differ: {seq[n:]} vs {full[n:]}"))
    ok &= same
    return 0 if ok else 1
