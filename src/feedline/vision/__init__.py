"""Image decoding and augmentation for feedline pipelines.

Decoders return NumPy arrays in a documented layout (HWC ``uint8`` RGB by
default; see `decode`) and release the GIL, so ``backend="thread"`` scales.
Ops take the pipeline's ``rng``, so augmentation is the same for every
backend and worker count; given a JPEG path instead of an array, the
geometric ops decode at 1/2, 1/4 or 1/8 scale when the output allows it.
The decoder libraries (simplejpeg, OpenCV, Pillow) are imported on first
use: ``pip install 'feedline[vision]'``. `plan_random_resized_crop` and
`DeviceJpegDecoder` move the decode to the GPU (``feedline[gpu]``). See
``docs/vision.md``.

>>> import numpy as np, feedline as fl, feedline.vision as fv
>>> images = np.zeros((8, 375, 500, 3), np.uint8)
>>> def augment(image, rng):
...     return fv.flip(fv.random_resized_crop(image, 224, rng), rng)
>>> pipe = fl.from_arrays(images).map(augment, backend="thread").batch(4)
>>> pipe = pipe.map_batch(lambda x: fv.normalize(x, fv.IMAGENET_MEAN, fv.IMAGENET_STD, layout="NCHW"))
>>> with pipe:
...     [b.shape for b in pipe]
[(4, 3, 224, 224), (4, 3, 224, 224)]
"""

from ._albumentations import from_albumentations
from ._crop import center_crop, random_resized_crop
from ._decode import MODES, decode, image_size
from ._device import DeviceJpegDecoder, EncodedCrop, plan_random_resized_crop
from ._errors import ImageDecodeError
from ._flip import flip
from ._masks import colour_mask_to_index, one_hot
from ._normalize import IMAGENET_MEAN, IMAGENET_STD, normalize
from ._resize import resize
from ._torchvision import from_torchvision

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "MODES",
    "DeviceJpegDecoder",
    "EncodedCrop",
    "ImageDecodeError",
    "center_crop",
    "colour_mask_to_index",
    "decode",
    "flip",
    "from_albumentations",
    "from_torchvision",
    "image_size",
    "normalize",
    "one_hot",
    "plan_random_resized_crop",
    "random_resized_crop",
    "resize",
]
