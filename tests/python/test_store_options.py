"""Store options seen from Python: unchanged chunks referenced (dedup), chunks read straight into
page-aligned targets, the counters that say so, and out-of-range values refused."""

import pytest
import torch

import conftest  # noqa: F401  (puts the built package on sys.path)
import preempt
from preempt import _C

MiB = 1 << 20


def frozen_model(seed):
    # 16 MiB of frozen weight (four whole 4 MiB chunks at least three of which lie inside it)
    # and a small trainable head.
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(2048, 2048, bias=False), torch.nn.Linear(2048, 4))
    m[0].weight.requires_grad_(False)
    return m


def saved_stats(model, path, step, **kwargs):
    h = preempt.save_async({"model": model}, path, step=step, **kwargs)
    try:
        assert h.wait(120) is True
        return h.stats()
    finally:
        h._owner[0].close()


@pytest.mark.parametrize("dedup", [True, False])
def test_frozen_part_is_referenced_not_rewritten(tmp_path, dedup):
    model = frozen_model(0)
    first = saved_stats(model, tmp_path, 1, dedup=dedup)
    assert first["referenced_bytes"] == 0 and first["written_bytes"] == first["bytes"]
    with torch.no_grad():
        model[1].weight.add_(1.0)  # only the head changes
    second = saved_stats(model, tmp_path, 2, dedup=dedup)
    assert second["bytes"] == first["bytes"]
    assert second["written_bytes"] + second["referenced_bytes"] == second["bytes"]
    if dedup:
        assert second["referenced_bytes"] >= 12 * MiB
        assert second["written_bytes"] <= second["bytes"] - 12 * MiB
    else:
        assert second["referenced_bytes"] == 0 and second["written_bytes"] == second["bytes"]
    back = frozen_model(1)
    assert preempt.load({"model": back}, tmp_path) == 2
    for want, got in zip(model.state_dict().values(), back.state_dict().values()):
        assert torch.equal(want, got)


def test_page_aligned_saves_are_written_from_staging(tmp_path):
    stats = saved_stats(frozen_model(0), tmp_path, 1)
    # The staging places the 16 MiB weight on a 4 KiB offset: its whole chunks need no copy.
    assert stats["from_items_bytes"] >= 12 * MiB


@pytest.mark.parametrize("in_place", [True, False])
def test_restore_reads_whole_chunks_into_page_aligned_targets(tmp_path, in_place):
    src = torch.randint(0, 256, (9 * MiB + 123,), dtype=torch.uint8)
    store = _C.Store(str(tmp_path))
    h = store.save_async(1, [("blob", "bytes", [], src.data_ptr(), src.numel())], {}, keepalive=src)
    assert h.wait(120) is True
    store.close()
    buf = _C.Buffer(src.numel())  # page-aligned memory
    assert buf.address % 4096 == 0
    store = _C.Store(str(tmp_path), read_into_targets=in_place, read_queue_depth=4)
    r = store.restore([("blob", "bytes", [], buf.address, src.numel())])
    store.close()
    assert r["step"] == 1 and r["bytes"] == src.numel()
    if in_place:
        assert r["in_place_bytes"] >= 8 * MiB  # the two whole 4 MiB chunks; the tail bounces
    else:
        assert r["in_place_bytes"] == 0
    assert torch.equal(torch.frombuffer(buf, dtype=torch.uint8), src)


def test_out_of_range_read_queue_depth_is_refused():
    for bad in (0, 257):
        with pytest.raises(preempt.InvalidArgumentError, match="read_queue_depth"):
            _C.Store("/tmp/preempt-never-created", read_queue_depth=bad)
