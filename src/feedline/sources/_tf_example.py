"""``tf.train.Example`` decoded with the protobuf package, without importing TensorFlow.

The message types are declared here, field for field as TensorFlow's
``example.proto`` and ``feature.proto`` declare them (the wire format is
the contract), in a descriptor pool of our own: it never clashes with
TensorFlow's when both are loaded. protobuf parses in C (upb), so a record
costs microseconds. Nothing is generated at build time.

A decoded Example is a dict ``{feature name: value}``: an ``int64_list``
is a 1-D ``int64`` array, a ``float_list`` a 1-D ``float32`` array, a
``bytes_list`` a list of ``bytes`` (as ``tf.io.parse_example`` with a
``VarLenFeature`` gives them; a scalar feature is ``value[0]``).
"""

from __future__ import annotations

import numpy as np

from .._optional import require
from ._shard_files import ShardFormatError

__all__ = ["check_feature_kinds", "decode_example", "feature_kinds"]

_PARSER = None  # the Example message class, built on first use in each process


def _field(message, name: str, number: int, kind: str, *, repeated=False, type_name=None, oneof=None):
    proto = require("google.protobuf.descriptor_pb2", "tfrecord", "decoding tf.train.Example", package="protobuf")
    field = message.field.add(name=name, number=number)
    field.type = getattr(proto.FieldDescriptorProto, f"TYPE_{kind}")
    field.label = proto.FieldDescriptorProto.LABEL_REPEATED if repeated else proto.FieldDescriptorProto.LABEL_OPTIONAL
    if type_name:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof
    if repeated and kind in ("FLOAT", "INT64"):
        field.options.packed = True
    return field


def example_class():
    """The message class of ``tensorflow.Example``, declared in a private descriptor pool."""
    global _PARSER
    if _PARSER is not None:
        return _PARSER
    proto = require("google.protobuf.descriptor_pb2", "tfrecord", "decoding tf.train.Example", package="protobuf")
    pool_module = require("google.protobuf.descriptor_pool", "tfrecord", "decoding tf.train.Example", package="protobuf")
    factory = require("google.protobuf.message_factory", "tfrecord", "decoding tf.train.Example", package="protobuf")
    file = proto.FileDescriptorProto(name="feedline/tf_example.proto", package="tensorflow", syntax="proto3")
    for name, kind in (("BytesList", "BYTES"), ("FloatList", "FLOAT"), ("Int64List", "INT64")):
        _field(file.message_type.add(name=name), "value", 1, kind, repeated=True)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, kind) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")), 1):
        _field(feature, name, number, "MESSAGE", type_name=f".tensorflow.{kind}", oneof=0)
    features = file.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, "STRING")
    _field(entry, "value", 2, "MESSAGE", type_name=".tensorflow.Feature")
    _field(features, "feature", 1, "MESSAGE", repeated=True, type_name=".tensorflow.Features.FeatureEntry")
    example = file.message_type.add(name="Example")
    _field(example, "features", 1, "MESSAGE", type_name=".tensorflow.Features")
    pool = pool_module.DescriptorPool()
    pool.Add(file)
    _PARSER = factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))
    return _PARSER


def decode_example(data: bytes) -> dict:
    """A serialized ``tf.train.Example`` as ``{name: int64 array | float32 array | list of bytes}``.

    Features come in name order (a protobuf map has none of its own), so
    every read gives the same dict.

    Raises:
        ValueError: ``data`` is not a serialized Example.
    """
    message = example_class()()
    try:
        message.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError, whose module depends on the backend
        raise ValueError(f"not a serialized tf.train.Example ({type(e).__name__}: {e})") from e
    sample = {}
    features = message.features.feature
    for name in sorted(features):
        feature = features[name]
        kind = feature.WhichOneof("kind")
        if kind == "int64_list":
            sample[name] = np.array(feature.int64_list.value, dtype=np.int64)
        elif kind == "float_list":
            sample[name] = np.array(feature.float_list.value, dtype=np.float32)
        elif kind == "bytes_list":
            sample[name] = list(feature.bytes_list.value)
        else:  # a Feature with no list set: TensorFlow reads it as empty
            sample[name] = []
    return sample


_KINDS = {np.dtype(np.int64): "int64_list", np.dtype(np.float32): "float_list"}


def feature_kinds(sample: dict) -> dict:
    """``{name: "int64_list" | "float_list" | "bytes_list"}`` of a decoded Example; an empty feature has no kind."""
    kinds = {}
    for name, value in sample.items():
        if isinstance(value, np.ndarray):
            kinds[name] = _KINDS[value.dtype]
        elif value:  # an empty list: an empty bytes_list, or a Feature with no list set; either fits any kind
            kinds[name] = "bytes_list"
    return kinds


def check_feature_kinds(sample: dict, reference: dict, where: str, reference_where: str) -> None:
    """Refuse a decoded Example whose feature has another kind than in the reference record.

    Raises:
        ShardFormatError: naming the record, the feature and both kinds.
    """
    for name, kind in feature_kinds(sample).items():
        expected = reference.get(name)
        if expected is not None and expected != kind:
            raise ShardFormatError(
                f"{where}: feature {name!r} is {kind} where {reference_where} holds {expected}; every record must "
                f"give a feature one type (tf.io.parse_example refuses this too): write the records so, or pass "
                f"decode=None (the record's bytes) or a function of your own"
            )
