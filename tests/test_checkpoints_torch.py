"""``pipe.torch()`` as a checkpointable loader: ``state_dict()`` / ``load_state_dict()``.

A state taken after k batches, loaded into a loader built the same way
(another backend and worker count), continues with exactly the rest of the
epoch and then the next epochs, by hand and through
``torch.distributed.checkpoint``.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl

torch = pytest.importorskip("torch")

N, BATCH = 40, 4


def plus_one(x):
    return x + 1


def build(backend: str = "serial", workers: int = 1):
    return fl.from_arrays(np.arange(N, dtype=np.int64)).shuffle(seed=3).map(plus_one, backend=backend, workers=workers).batch(BATCH)


def epochs(loader, count: int) -> list[list[int]]:
    return [[int(v) for b in loader for v in b.tolist()] for _ in range(count)]


def run_until(loader, k: int):
    """Take k batches of the loader's next epoch; return them and the live iterator."""
    it = iter(loader)
    return [int(v) for _ in range(k) for v in next(it).tolist()], it


@pytest.mark.parametrize(("before", "after"), [(("serial", 1), ("thread", 3)), (("thread", 2), ("process", 2)), (("process", 2), ("serial", 1))])
def test_state_dict_mid_epoch_resumes_the_rest_of_the_epoch_then_the_next(before, after, no_leaks):
    expected = epochs(build().torch(), 2)
    loader = build(*before).torch()
    seen, it = run_until(loader, 3)
    state = loader.state_dict()
    it.close()
    loader.dataset.pipeline.close()
    fresh = build(*after).torch()
    fresh.load_state_dict(state)
    rest, following = epochs(fresh, 2)
    fresh.dataset.pipeline.close()
    assert seen + rest == expected[0]
    assert following == expected[1]


def test_state_dict_between_epochs_starts_the_next_epoch():
    expected = epochs(build().torch(), 3)
    loader = build().torch()
    epochs(loader, 1)
    state = loader.state_dict()
    fresh = build().torch()
    fresh.load_state_dict(state)
    assert epochs(fresh, 2) == expected[1:]


def test_loaded_state_is_reported_again_until_iterated():
    loader = build().torch()
    _, it = run_until(loader, 2)
    state = loader.state_dict()
    fresh = build().torch()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_state_of_another_pipeline_is_refused_when_loaded():
    loader = build().torch()
    _, it = run_until(loader, 2)
    state = loader.state_dict()
    other = fl.from_arrays(np.arange(N + 1, dtype=np.int64)).shuffle(seed=3).batch(BATCH).torch()
    with pytest.raises(ValueError, match="fingerprint|length|source"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="feedline"):
        other.load_state_dict({"sampler": 3})


def test_distributed_checkpoint_saves_and_loads_the_loader(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    expected = epochs(build().torch(), 2)
    loader = build("thread", 2).torch()
    seen, it = run_until(loader, 4)
    dcp.save({"loader": loader}, checkpoint_id=str(tmp_path / "ckpt"))
    it.close()
    loader.dataset.pipeline.close()
    fresh = build("serial", 1).torch()
    dcp.load({"loader": fresh}, checkpoint_id=str(tmp_path / "ckpt"))
    rest, following = epochs(fresh, 2)
    assert seen + rest == expected[0]
    assert following == expected[1]


def test_lightning_resumes_mid_epoch_from_its_checkpoint(tmp_path):
    lightning = pytest.importorskip("lightning")
    expected = epochs(build().torch(), 2)
    seen: list[int] = []

    class Stop(Exception):
        pass

    class Model(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_index):
            seen.extend(int(v) for v in batch.tolist())
            return self.layer(batch.float()[:, None]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class SaveThenStop(lightning.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
            if batch_index == 2:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")
                raise Stop

    def trainer(*callbacks):
        return lightning.Trainer(
            max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path, callbacks=list(callbacks),
        )

    with pytest.raises(Stop):
        trainer(SaveThenStop()).fit(Model(), train_dataloaders=build("thread", 2).torch())
    assert seen == expected[0][: 3 * BATCH]
    seen.clear()
    trainer().fit(Model(), train_dataloaders=build("serial", 1).torch(), ckpt_path=tmp_path / "mid.ckpt")
    assert seen == expected[0][3 * BATCH:] + expected[1]


def test_pipeline_state_dict_resumes_where_its_latest_iterator_stands(no_leaks):
    expected = [[int(v) for b in e for v in b.tolist()] for e in (build().epoch(0), build().epoch(1))]
    pipe = build("thread", 2)
    it = iter(pipe)
    seen = [int(v) for _ in range(3) for v in next(it)]
    state = pipe.state_dict()
    it.close()
    pipe.close()
    fresh = build("process", 2)
    fresh.load_state_dict(state)
    rest = [int(v) for b in fresh for v in b]
    following = [int(v) for b in fresh for v in b]
    fresh.close()
    assert seen + rest == expected[0]
    assert following == expected[1]


def test_pipeline_state_dict_after_a_whole_epoch_starts_the_next():
    pipe = build()
    list(pipe)
    fresh = build()
    fresh.load_state_dict(pipe.state_dict())
    assert [int(v) for b in fresh for v in b] == [int(v) for b in build().epoch(1) for v in b]


def test_loader_staging_batches_on_a_device_refuses_state_dict_with_advice():
    loader = build().torch(device="meta")
    with pytest.raises(fl.FeedlineError, match="without device="):
        loader.state_dict()


def test_edited_or_truncated_loader_state_is_refused_naming_the_field():
    loader = build().torch()
    _, it = run_until(loader, 2)
    state = loader.state_dict()
    with pytest.raises(ValueError, match="JSON"):
        build().torch().load_state_dict({**state, "position": state["position"][:-5]})
    edited = state["position"].replace('"given": 2', '"given": -1')
    with pytest.raises(ValueError, match="given"):
        build().torch().load_state_dict({**state, "position": edited})
    tampered = state["position"].replace('"offset": ', '"offset": 1')
    assert tampered != state["position"] and edited != state["position"]
    with pytest.raises(ValueError):
        build().torch().load_state_dict({**state, "position": tampered})
