"""FedPeWS: straight-through scores, masked weight updates, the diversity term, Fixed blocks,
score persistence and the server's diversity reference, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedapp.core.config import RunConfig, parse
from fedapp.core.device import host_arrays
from fedapp.core.masks import model_param_masks, neuron_layout, torch_param_masks
from fedapp.core.train import TrainSettings
from fedapp.data import ClientData
from fedapp.methods.base import ClientJob
from fedapp.methods.fedpews import PeWSClient, PeWSParams, PeWSServer, mask_stats, warmup_rounds
from fedapp.methods.fedpews_fixed import FixedClient, fixed_blocks
from fedapp.methods.pews_steps import diversity_term, input_masks, split
from fedapp.methods.pews_train import WarmupLoop, masks_to_records, records_to_masks
from fedapp.models import initial_model
from fedapp.models.cnn import cnn
from fedapp.models.mlp import mlp
from tests.memory_store import MemoryStore

SGD = TrainSettings(epochs=1, steps=0, batch_size=4, lr=0.1)
MOMENTUM = TrainSettings(epochs=1, steps=0, batch_size=4, lr=0.1, momentum=0.9)


def tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = mlp(3, (4, 3), 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.fill_(0.5)  # keep every ReLU of this tiny net alive, so all gradients are non-trivial
    x = torch.randn(8, 3)
    y = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0])
    return model, x, y


def by_hand_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, m1: torch.Tensor, m2: torch.Tensor) -> torch.Tensor:
    """The 3-4-3-2 MLP with weights x * M written out: M = outer(m_out, m_in) per layer."""
    w1, b1, w2, b2, w3, b3 = (p for _, p in model.named_parameters())
    ones_in, ones_out = torch.ones(3), torch.ones(2)
    h1 = torch.relu(x @ (w1 * torch.outer(m1, ones_in)).T + b1 * m1)
    h2 = torch.relu(h1 @ (w2 * torch.outer(m2, m1)).T + b2 * m2)
    out = h2 @ (w3 * torch.outer(ones_out, m2)).T + b3
    return nn.functional.cross_entropy(out, y)


def test_ste_gradient_reaches_scores_and_equals_dL_dm_times_sigmoid_slope() -> None:
    model, x, y = tiny()
    layout = neuron_layout(model)
    scores = torch.tensor([0.5, -0.3, 1.0, 0.2, -1.0, 0.4, 2.0])
    loop = WarmupLoop(model, layout, SGD)
    new, drawn = loop.score_step(x, y, scores, None, 0.0, 1.0, torch.Generator().manual_seed(7))
    grad = scores - new  # lr = 1
    bits = torch.bernoulli(torch.sigmoid(scores), generator=torch.Generator().manual_seed(7))
    assert torch.equal(drawn, bits)
    m = bits.clone().requires_grad_()
    m1, m2 = m[:4], m[4:]
    (dl_dm,) = torch.autograd.grad(by_hand_loss(model, x, y, m1, m2), m)
    sig = torch.sigmoid(scores)
    expected = dl_dm * sig * (1 - sig)
    assert torch.allclose(grad, expected, atol=1e-6), (grad, expected)
    assert (grad[bits == 1].abs() > 0).any()  # the task gradient reaches the scores of kept neurons
    assert torch.all(grad[bits == 0] == 0)  # weight masking: an off neuron outputs relu(0) and gets none


def test_identity_ste_passes_dL_dm_to_the_scores_without_the_sigmoid_slope() -> None:
    model, x, y = tiny()
    layout = neuron_layout(model)
    scores = torch.tensor([0.5, -0.3, 1.0, 0.2, -1.0, 0.4, 2.0])
    new, drawn = WarmupLoop(model, layout, SGD, ste="identity").score_step(x, y, scores, None, 0.0, 1.0, torch.Generator().manual_seed(7))
    m = drawn.clone().requires_grad_()
    (dl_dm,) = torch.autograd.grad(by_hand_loss(model, x, y, m[:4], m[4:]), m)
    assert torch.allclose(scores - new, dl_dm, atol=1e-6)
    assert (dl_dm[drawn == 1].abs() > 0).any()


def test_rows_extent_masks_incoming_weights_only() -> None:
    """D11 option: layer l's weight mask is outer(m_l, 1), so the outgoing weights of an off
    neuron stay in the sub-model (they are uploaded) but get no gradient (the neuron outputs 0)."""
    model, x, y = tiny()
    layout = neuron_layout(model)
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    rows = torch_param_masks(layout, split(layout, mask), shapes, "rows")
    assert torch.equal(rows["1.weight"], torch.outer(mask[:4], torch.ones(3)))
    assert torch.equal(rows["3.weight"], torch.outer(mask[4:], torch.ones(4))) and torch.equal(rows["5.weight"], torch.ones(2, 3))
    outer, by_rows = WarmupLoop(model, layout, SGD), WarmupLoop(model, layout, SGD, extent="rows")
    assert torch.allclose(outer.forward(x, mask), by_rows.forward(x, mask), atol=1e-6)  # an off neuron outputs 0 either way
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    by_rows.weight_step(x, y, mask)
    after = dict(model.named_parameters())
    off_in, on_out = mask[:4] == 0, mask[4:] == 1  # off layer-1 neurons: their outgoing weights are columns of 3.weight
    assert torch.equal(after["3.weight"][:, off_in], before["3.weight"][:, off_in])
    assert not torch.equal(after["3.weight"][on_out][:, ~off_in], before["3.weight"][on_out][:, ~off_in])
    np.testing.assert_array_equal(model_param_masks(model, [mask[:4].numpy(), mask[4:].numpy()], "rows")["5.weight"], np.ones((2, 3), bool))


def test_activation_masking_gives_off_neurons_a_task_gradient_and_the_same_forward() -> None:
    model, x, y = tiny()
    layout = neuron_layout(model)
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    w_loop, a_loop = WarmupLoop(model, layout, SGD, "weight"), WarmupLoop(model, layout, SGD, "activation")
    assert torch.allclose(w_loop.forward(x, mask), a_loop.forward(x, mask), atol=1e-6)
    scores = torch.zeros(7)
    _, drawn = a_loop.score_step(x, y, scores, None, 0.0, 1.0, torch.Generator().manual_seed(3))
    new, _ = a_loop.score_step(x, y, scores, None, 0.0, 1.0, torch.Generator().manual_seed(3))
    assert (new[drawn == 0] != 0).any()


@pytest.mark.parametrize("settings", [SGD, MOMENTUM], ids=["sgd", "momentum"])
def test_weight_step_leaves_masked_out_weights_exactly_unchanged(settings: TrainSettings) -> None:
    model, x, y = tiny()
    layout = neuron_layout(model)
    loop = WarmupLoop(model, layout, settings, prox_mu=0.5)
    first = torch.ones(7)
    second = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    loop.weight_step(x, y, first)  # fills the momentum buffers of every entry
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loop.weight_step(x, y, second)
    keep = model_param_masks(model, layout.split(second.numpy().astype(bool)))
    for n, p in model.named_parameters():
        frozen = ~torch.from_numpy(keep[n])
        assert torch.equal(p.detach()[frozen], before[n][frozen]), n
        assert not torch.equal(p.detach()[~frozen], before[n][~frozen]), n  # kept entries did move


def test_diversity_gradient_has_the_spec_sign_and_pushes_away_from_the_reference() -> None:
    s = torch.tensor([-1.0, 0.0, 0.5, 2.0], requires_grad=True)
    ref = torch.tensor([0.5, 0.5, 0.2, 0.9])
    lam = 5.0
    (grad,) = torch.autograd.grad(diversity_term(s, ref, lam), s)
    sig = torch.sigmoid(s.detach())
    assert torch.allclose(grad, -2 * lam * (sig - ref) * sig * (1 - sig))
    assert grad[1] == 0  # sigmoid(0) = ref: symmetric start, no push
    stepped = torch.sigmoid(s.detach() - 0.1 * grad)
    moved = (stepped - ref).abs() - (sig - ref).abs()
    assert (moved[[0, 2, 3]] > 0).all()  # a descent step moves sigmoid(s) away from ref


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_fixed_blocks_cover_every_hidden_neuron_exactly_once(n: int) -> None:
    widths = (32, 64, 128, 32)
    blocks = fixed_blocks(widths, n)
    assert np.array_equal(np.sum(blocks, axis=0), np.ones(256))
    sizes = [[int(b[o : o + w].sum()) for o, w in zip(np.cumsum((0, *widths[:-1])), widths, strict=True)] for b in blocks]
    expected = {2: [[16, 32, 64, 16]] * 2, 4: [[8, 16, 32, 8]] * 4, 3: [[11, 22, 43, 11], [11, 21, 43, 11], [10, 21, 42, 10]]}
    if n in expected:
        assert sizes == expected[n]
    first = blocks[0][:32]
    assert first[: -(-32 // n)].all() and not first[-(-32 // n) :].any()  # contiguous, client 0 gets the first block


def test_torch_param_masks_match_the_numpy_expansion_on_mlp_and_cnn() -> None:
    rng = np.random.default_rng(0)
    for model in (mlp(5, (32, 64, 128, 32), 4), cnn((3, 16, 16), 10)):
        layout = neuron_layout(model)
        bits = rng.random(layout.total) < 0.5
        want = model_param_masks(model, layout.split(bits))
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        got = torch_param_masks(layout, split(layout, torch.from_numpy(bits.astype(np.float32))), shapes)
        assert set(got) == set(shapes)
        for n, m in got.items():
            assert np.array_equal(m.numpy().astype(bool), want[n]), n


def test_input_masks_forward_equals_weight_masked_forward_on_a_cnn() -> None:
    torch.manual_seed(1)
    model = cnn((3, 16, 16), 10)
    layout = neuron_layout(model)
    bits = torch.from_numpy((np.random.default_rng(1).random(layout.total) < 0.5).astype(np.float32))
    x = torch.randn(2, 3, 16, 16)
    with input_masks(model, layout, split(layout, bits)):
        hooked = model(x)
    loop = WarmupLoop(model, layout, SGD)
    assert torch.allclose(hooked, loop.forward(x, bits), atol=1e-5)


def test_mask_records_round_trip_and_reject_wrong_sizes() -> None:
    layout = neuron_layout(mlp(5, (32, 64, 128, 32), 4))
    bits = np.random.default_rng(2).random(256) < 0.3
    rec = masks_to_records(bits, layout)
    assert sum(v.nbytes for v in rec.values()) == 32  # h / 8 bytes
    assert np.array_equal(records_to_masks(rec, layout), bits)
    rec["1"] = rec["1"][:-1]
    with pytest.raises(ValueError, match="expected 4 packed bytes"):
        records_to_masks(rec, layout)


def test_warmup_rounds_round_half_up() -> None:
    def cfg(t: int) -> RunConfig:
        return parse(RunConfig, {"num-server-rounds": t})

    assert warmup_rounds(PeWSParams(warmup_fraction=0.125), cfg(200)) == 25
    assert warmup_rounds(PeWSParams(warmup_fraction=0.5), cfg(5)) == 3
    assert warmup_rounds(PeWSParams(warmup_fraction=0.0), cfg(200)) == 0


def test_mask_stats_density_and_jaccard_overlap() -> None:
    a = np.array([1, 1, 0, 0], bool)
    b = np.array([1, 0, 1, 0], bool)
    c = np.array([0, 0, 1, 1], bool)
    stats = mask_stats([a, b, c])
    assert stats["mask_density"] == 0.5
    assert stats["mask_overlap"] == pytest.approx((1 / 3 + 0 + 1 / 3) / 3)


SYN = {
    "dataset": "synthetic-32k",
    "model": "mlp",
    "mlp-hidden": "4,3",
    "num-clients": 3,
    "partition": "0|1|2,3",
    "batch-size": 4,
    "lr": 0.1,
}


def test_server_reference_is_the_mean_of_the_other_clients_last_masks() -> None:
    cfg = parse(RunConfig, {**SYN, "method": "fedpews"})
    server = PeWSServer(cfg, PeWSParams(mask_init=1.0), {}, {}, initial_model(cfg))
    assert np.allclose(server.reference(0), 1 / (1 + np.exp(-1.0)))  # nobody known yet: sigmoid(s0)
    server.last = {0: np.array([1, 0, 1, 0, 1, 1, 0], np.float32), 1: np.array([1, 1, 0, 0, 0, 1, 1], np.float32)}
    assert np.array_equal(server.reference(0), server.last[1])
    assert np.array_equal(server.reference(2), [1, 0.5, 0.5, 0, 0.5, 1, 0.5])
    task = server.node_task(1, 2)
    assert task.config["phase"] == "warmup" and task.config["pews-seen"] == 0
    assert np.array_equal(np.concatenate([task.records["pews-ref"]["1"], task.records["pews-ref"]["3"]]), server.reference(2))
    assert server.node_task(26, 2).config == {"phase": "full"} and not server.node_task(26, 2).records


def job_for(policy_cfg: dict[str, object], store: MemoryStore, server_round: int, config: dict[str, object], records: dict) -> ClientJob:  # type: ignore[type-arg]
    cfg = parse(RunConfig, {**SYN, **policy_cfg})
    torch.manual_seed(0)
    model = mlp(5, (4, 3), 4)
    rng = np.random.default_rng(0)
    empty = np.zeros((0, 5), np.float32), np.zeros(0, np.int64)
    data = ClientData(rng.normal(size=(16, 5)).astype(np.float32), rng.integers(0, 4, 16), *empty)
    gen = torch.Generator().manual_seed(server_round)
    return ClientJob(cfg, PeWSParams(), 0, server_round, config, records, model, host_arrays(model.state_dict()), {}, data, store, gen)  # type: ignore[arg-type]


def test_scores_persist_in_the_state_store_and_are_not_uploaded() -> None:
    store = MemoryStore()
    ref = {"pews-ref": {"1": np.full(4, 0.5, np.float32), "3": np.full(3, 0.5, np.float32)}}
    first = PeWSClient(parse(RunConfig, SYN), PeWSParams()).train(job_for({}, store, 1, {"phase": "warmup"}, ref))
    saved = store.load(0, "pews-scores")
    assert set(saved) == {"1", "3"}
    s1 = np.concatenate([saved["1"], saved["3"]])
    assert not np.allclose(s1, 0.0)  # 4 score steps moved them away from s0 = 0
    job2 = job_for({}, store, 2, {"phase": "warmup", "pews-seen": 1}, ref)
    assert np.array_equal(PeWSClient(job2.cfg, PeWSParams()).load_scores(job2, neuron_layout(job2.model)).numpy(), s1)
    assert set(first.records) == {"pews-mask"}  # the scores stay home
    kept = records_to_masks(first.records["pews-mask"], neuron_layout(job2.model))
    assert first.metrics["mask-density"] == kept.mean()
    assert first.masks is not None and np.array_equal(first.masks["1.bias"], kept[:4])


def test_fixed_client_trains_only_its_block_under_momentum() -> None:
    store = MemoryStore()
    layout = neuron_layout(mlp(5, (4, 3), 4))
    block = fixed_blocks(layout.widths, 2)[1]
    job = job_for({"momentum": 0.9}, store, 1, {"phase": "warmup"}, {"pews-neuron-mask": masks_to_records(block, layout)})
    before = {n: p.detach().clone() for n, p in job.model.named_parameters()}
    result = FixedClient(job.cfg, PeWSParams()).train(job)
    keep = model_param_masks(job.model, layout.split(block))
    assert result.masks is not None
    for n, p in job.model.named_parameters():
        assert np.array_equal(result.masks[n], keep[n])
        frozen = torch.from_numpy(~keep[n])
        assert torch.equal(p.detach()[frozen], before[n][frozen]), n
        assert not torch.equal(p.detach()[~frozen], before[n][~frozen]), n


def test_server_remembers_masks_or_probabilities_and_reports_mask_metrics() -> None:
    from fedapp.core.aggregate import Contribution
    from fedapp.methods.base import Reply

    cfg = parse(RunConfig, {**SYN, "method": "fedpews"})
    layout = neuron_layout(mlp(5, (4, 3), 4))
    a, b = np.array([1, 1, 0, 0, 1, 0, 1], bool), np.array([1, 0, 1, 0, 1, 1, 0], bool)
    probs = {"1": np.array([0.9, 0.8, 0.1, 0.2], np.float32), "3": np.array([0.7, 0.3, 0.6], np.float32)}
    replies = [
        Reply(0, Contribution(1.0, {}), {}, {"pews-mask": masks_to_records(a, layout), "pews-probs": probs}),
        Reply(1, Contribution(1.0, {}), {}, {"pews-mask": masks_to_records(b, layout)}),
    ]
    by_mask = PeWSServer(cfg, PeWSParams(), {}, {}, initial_model(cfg))
    row = by_mask.after_round(1, replies)
    assert row == {"warmup": True, "mask_density": (4 / 7 + 4 / 7) / 2, "mask_overlap": 2 / 6}
    assert np.array_equal(by_mask.reference(1), a.astype(np.float32))
    by_probs = PeWSServer(cfg, PeWSParams(diversity_ref="probs"), {}, {}, initial_model(cfg))
    by_probs.after_round(1, replies)
    assert np.allclose(by_probs.reference(1), [0.9, 0.8, 0.1, 0.2, 0.7, 0.3, 0.6])
    assert by_probs.after_round(26, replies) == {"warmup": False}
