"""Where samples come from: random-access sources and sharded generators."""

from ._arrays import ArraySource, from_arrays
from ._base import Source
from ._files import FileSource, from_files
from ._generator import GeneratorSource, from_generator
from ._sequence import SequenceSource, from_sequence

__all__ = [
    "ArraySource",
    "FileSource",
    "GeneratorSource",
    "SequenceSource",
    "Source",
    "from_arrays",
    "from_files",
    "from_generator",
    "from_sequence",
]
