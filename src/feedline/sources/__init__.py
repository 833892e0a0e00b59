"""Sources: where samples come from, read by integer index (or streamed, for generators).

Imported lazily (PEP 562): a worker unpickles a source class from its own
module and should not import the `from_*` factories, which import the
pipeline facade.
"""

import importlib

_WHERE = {
    "ArraySource": "._arrays", "from_arrays": "._arrays",
    "ComposedSource": "._composed", "concatenate": "._compose", "mix": "._compose",
    "FileSource": "._files", "from_files": "._files",
    "GeneratorSource": "._generator", "from_generator": "._generator",
    "SequenceSource": "._sequence", "from_sequence": "._sequence",
    "Source": "._base",
    "ShardFormatError": "._shard_files",
    "TFRecordSource": "._tfrecord", "from_tfrecord": "._tfrecord",
    "WebDatasetSource": "._webdataset", "from_webdataset": "._webdataset",
    "ArrayRecordSource": "._array_record", "from_array_record": "._array_record",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline.sources' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
