"""Reading Hugging Face `datasets` folders and Parquet files in place."""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import feedline as fl
from feedline.store import StoreError


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    PIL = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    pictures = [rng.integers(0, 255, (6 + i % 3, 5, 3), dtype=np.uint8) for i in range(30)]
    features = datasets.Features({
        "image": datasets.Image(),
        "label": datasets.ClassLabel(names=["a", "b", "c"]),
        "vector": datasets.Sequence(datasets.Value("float32"), length=4),
        "text": datasets.Value("string"),
    })
    ds = datasets.Dataset.from_dict(
        {"image": [PIL.fromarray(p) for p in pictures], "label": [i % 3 for i in range(30)],
         "vector": [np.arange(4, dtype=np.float32) + i for i in range(30)], "text": [f"row {i}" for i in range(30)]},
        features=features,
    )
    root = tmp_path_factory.mktemp("hf")
    ds.save_to_disk(str(root / "train"), num_shards=3)
    datasets.DatasetDict({"train": ds, "test": ds.select(range(5))}).save_to_disk(str(root / "dict"))
    return root / "train", pictures


def test_a_saved_hugging_face_dataset_reads_in_place_with_decoded_images(hf_folder):
    path, pictures = hf_folder
    pipe = fl.from_hf_dataset(path)
    assert len(pipe) == 30
    samples = list(pipe)
    for i, sample in enumerate(samples):
        np.testing.assert_array_equal(sample["image"], pictures[i])  # PNG-encoded by datasets, decoded by feedline
        assert int(sample["label"]) == i % 3 and sample["text"] == f"row {i}"
        assert sample["vector"].dtype == np.float32 and sample["vector"].tolist() == [i, i + 1, i + 2, i + 3]


def test_hugging_face_columns_and_raw_image_bytes(hf_folder):
    path, _ = hf_folder
    sample = next(iter(fl.from_hf_dataset(path, columns=["image", "label"], decode_images=False)))
    assert set(sample) == {"image", "label"} and isinstance(sample["image"]["bytes"], bytes)
    with pytest.raises(StoreError, match=r"no column\(s\) \['nope'\]"):
        fl.from_hf_dataset(path, columns=["nope"])


def test_hugging_face_dataset_every_row_once_on_every_backend(hf_folder, backend, no_leaks):
    path, _ = hf_folder
    pipe = fl.from_hf_dataset(path, columns=["label", "text"]).shuffle(seed=2).map(lambda s: int(s["text"][4:]), backend=backend, workers=2).batch(7)
    with pipe:
        assert sorted(int(v) for b in pipe for v in b) == list(range(30))


def test_a_dataset_dict_folder_asks_for_a_split(hf_folder):
    path, _ = hf_folder
    with pytest.raises(StoreError, match=r"DatasetDict with splits \['test', 'train'\]"):
        fl.from_hf_dataset(path.parent / "dict")


@pytest.fixture
def parquet_files(tmp_path):
    for part in range(2):
        rows = np.arange(part * 50, part * 50 + 50)
        table = pa.table({
            "id": rows,
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(rows, 3).astype(np.float32)), 3),
            "name": [f"n{i}" for i in rows],
        })
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=16)
    return tmp_path


def test_parquet_rows_read_in_place_by_row_group(parquet_files, backend, no_leaks):
    pipe = fl.from_parquet(str(parquet_files / "*.parquet"), columns=["id", "emb"])
    assert len(pipe) == 100 and "8 row groups" in repr(pipe)
    with pipe.shuffle(seed=1).map(lambda s: (s["id"], s["emb"]), backend=backend, workers=2).batch(16) as shuffled:
        rows = [(int(i), e.tolist()) for ids, embs in shuffled for i, e in zip(ids, embs)]
    assert sorted(i for i, _ in rows) == list(range(100))
    assert all(e == [float(i)] * 3 for i, e in rows)


def test_parquet_samples_are_dicts_of_the_selected_columns(parquet_files):
    sample = list(fl.from_parquet(parquet_files))[63]
    assert set(sample) == {"id", "emb", "name"} and int(sample["id"]) == 63 and sample["name"] == "n63"
    assert isinstance(sample["emb"], np.ndarray) and sample["emb"].dtype == np.float32


def test_parquet_errors_name_what_is_missing(parquet_files):
    with pytest.raises(StoreError, match="no Parquet files match"):
        fl.from_parquet(str(parquet_files / "*.nothing"))
    with pytest.raises(StoreError, match=r"no column\(s\) \['x'\]"):
        fl.from_parquet(parquet_files, columns=["x"])
    (parquet_files / "zz.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(StoreError, match="zz.parquet.*as Parquet"):
        fl.from_parquet(parquet_files)


# ------------------------------------------------ one schema across files
def _two_parquet_files(folder, first: dict, second: dict):
    pq.write_table(pa.table(first), folder / "a.parquet")
    pq.write_table(pa.table(second), folder / "b.parquet")


def test_a_column_whose_type_changes_between_parquet_files_is_refused_naming_both(tmp_path):
    _two_parquet_files(tmp_path, {"a": [1, 2, 3]}, {"a": ["four", "five"]})
    with pytest.raises(StoreError) as caught:
        fl.from_parquet(tmp_path)
    message = str(caught.value)
    assert "'a'" in message and "int64" in message and "string" in message
    assert str(tmp_path / "a.parquet") in message and str(tmp_path / "b.parquet") in message and "table.cast" in message


def test_a_type_change_in_a_column_left_out_is_not_read(tmp_path):
    _two_parquet_files(tmp_path, {"a": [1, 2, 3], "b": [1, 2, 3]}, {"a": [4, 5], "b": ["x", "y"]})
    (batch,) = list(fl.from_parquet(tmp_path, columns=["a"]).batch(5))
    assert batch["a"].tolist() == [1, 2, 3, 4, 5]


def test_a_column_missing_from_one_parquet_file_is_refused_naming_both(tmp_path):
    _two_parquet_files(tmp_path, {"a": [1, 2], "b": [1.0, 2.0]}, {"a": [3]})
    with pytest.raises(StoreError, match=r"column 'b' is in '.*a\.parquet' but not in '.*b\.parquet'"):
        fl.from_parquet(tmp_path)
    with pytest.raises(StoreError, match=r"column 'b' is in '.*a\.parquet' but not in '.*b\.parquet'"):
        fl.from_parquet(tmp_path, columns=["a", "b"])
    assert [int(s["a"]) for s in fl.from_parquet(tmp_path, columns=["a"])] == [1, 2, 3]


def test_a_column_only_a_later_parquet_file_has_is_refused_with_the_common_columns(tmp_path):
    _two_parquet_files(tmp_path, {"a": [1, 2]}, {"a": [3], "extra": ["x"]})
    with pytest.raises(StoreError, match=r"b\.parquet' has column\(s\) \['extra'\] that '.*a\.parquet' lacks.*columns=\['a'\]"):
        fl.from_parquet(tmp_path)


def test_a_column_all_null_in_one_parquet_file_reads_as_none_there(tmp_path):
    _two_parquet_files(tmp_path, {"v": pa.array([None, None], pa.null())}, {"v": pa.array([[1.0], [2.0]], pa.list_(pa.float32()))})
    samples = list(fl.from_parquet(tmp_path))
    assert [s["v"] for s in samples[:2]] == [None, None]
    assert [s["v"].tolist() for s in samples[2:]] == [[1.0], [2.0]]


def test_hugging_face_arrow_files_whose_column_type_changes_are_refused_naming_both(tmp_path):
    datasets = pytest.importorskip("datasets")
    import shutil

    for name, values in (("one", [1, 2, 3]), ("two", ["four", "five"])):
        datasets.Dataset.from_dict({"a": values}).save_to_disk(str(tmp_path / name))
        (arrow,) = (tmp_path / name).glob("*.arrow")
        shutil.copy(arrow, tmp_path / f"{name}.arrow")
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("one", "two"):
        shutil.move(tmp_path / f"{name}.arrow", folder / f"{name}.arrow")
    with pytest.raises(StoreError) as caught:
        fl.from_hf_dataset(folder)
    message = str(caught.value)
    assert "one.arrow" in message and "two.arrow" in message and "int64" in message and "string" in message


# ------------------------------------------------ nulls: None for every type, in every row
NULLABLE = {  # column type -> a non-null value of it
    "list<float32>": (pa.list_(pa.float32()), [1.5, 2.5]),
    "list<int64>": (pa.list_(pa.int64()), [1, 2]),
    "int64": (pa.int64(), 7),
    "float64": (pa.float64(), 0.5),
    "string": (pa.string(), "seven"),
    "fixed<float32, 2>": (pa.list_(pa.float32(), 2), [1.5, 2.5]),
}


def _nullable_file(folder, null_row: int, rows: int = 4):
    table = {}
    for name, (kind, value) in NULLABLE.items():
        table[name] = pa.array([None if i == null_row else value for i in range(rows)], kind)
    pq.write_table(pa.table(table), folder / f"null-at-{null_row}.parquet")
    return folder / f"null-at-{null_row}.parquet"


@pytest.mark.parametrize("null_row", [0, 2])
def test_a_null_reads_as_none_for_every_type_in_any_row(tmp_path, null_row):
    samples = list(fl.from_parquet(_nullable_file(tmp_path, null_row)))
    for name, (_, value) in NULLABLE.items():
        assert samples[null_row][name] is None, name
        others = [s[name] for i, s in enumerate(samples) if i != null_row]
        assert all(np.asarray(v).tolist() == value for v in others), name


@pytest.mark.parametrize("null_row", [0, 2])
@pytest.mark.parametrize("column", [c for c in NULLABLE if c != "string"])
def test_batching_a_stacked_column_with_a_null_is_refused_naming_it_in_any_row(tmp_path, null_row, column, backend, no_leaks):
    pipe = fl.from_parquet(_nullable_file(tmp_path, null_row), columns=[column]).map(lambda s: s, backend=backend, workers=2).batch(4)
    with pipe, pytest.raises(fl.SampleError) as caught:
        list(pipe)
    message = str(caught.value)
    assert f"cannot batch sample {null_row}: field [{column!r}] is None" in message, message
    assert "fill it in map()" in message and "collate=" in message


@pytest.mark.parametrize("null_row", [0, 2])
def test_batching_a_string_column_with_a_null_keeps_it_in_place(tmp_path, null_row):
    (batch,) = list(fl.from_parquet(_nullable_file(tmp_path, null_row), columns=["string"]).batch(4))
    assert batch["string"] == ["seven" if i != null_row else None for i in range(4)]


def test_a_null_inside_a_list_keeps_the_row_a_list_with_none_there(tmp_path):
    pq.write_table(pa.table({"v": pa.array([[1.0, None], [2.0, 3.0]], pa.list_(pa.float32())),
                             "n": pa.array([[1, None], [2, 3]], pa.list_(pa.int64()))}), tmp_path / "inner.parquet")
    first, second = list(fl.from_parquet(tmp_path / "inner.parquet"))
    assert first == {"v": [1.0, None], "n": [1, None]}  # never NaN or 0 in place of the null
    assert second["v"].dtype == np.float32 and second["n"].dtype == np.int64


def test_hugging_face_nulls_read_as_none(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"v": datasets.Sequence(datasets.Value("float32")), "label": datasets.Value("int64")})
    datasets.Dataset.from_dict({"v": [[1.0], None, [2.0]], "label": [None, 1, 2]}, features=features).save_to_disk(str(tmp_path / "ds"))
    samples = list(fl.from_hf_dataset(tmp_path / "ds"))
    assert samples[1]["v"] is None and samples[0]["label"] is None
    assert samples[0]["v"].tolist() == [1.0] and int(samples[2]["label"]) == 2
