"""ImageFolder JPEGs into a PyTorch training loop.

The layout torchvision's ``ImageFolder`` reads (``root/<class>/<image>.jpg``)
is read by ``fl.from_files(root, labels="parent")``; each JPEG is decoded
straight into a random crop (at a reduced scale when the crop allows it),
flipped, batched, normalised per batch and handed to PyTorch as tensors on
the device, ahead of the step. A small convolutional network trains on it.

Run (makes its own JPEGs in a temporary folder; ``pip install 'feedline[torch,vision]'``):

    python examples/imagefolder_torch.py                       # 3 classes x 64 images, 2 epochs
    python examples/imagefolder_torch.py --root /data/train    # your own ImageFolder tree
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from PIL import Image

import feedline as fl
import feedline.vision as fv


def make_image_folder(root: str, classes: int, per_class: int, size: int) -> None:
    """Write ``classes`` folders of ``per_class`` JPEGs: each class a different mean colour, plus noise."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class_{c}"), exist_ok=True)
        colour = rng.integers(0, 256, 3)
        for i in range(per_class):
            pixels = np.clip(colour + rng.normal(0, 40, (size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(os.path.join(root, f"class_{c}", f"{i:04d}.jpg"), quality=90)


def augment(sample, rng):
    path, label = sample
    image = fv.random_resized_crop(path, 64, rng)  # decodes the JPEG, at 1/2, 1/4 or 1/8 scale when the crop allows
    return fv.flip(image, rng), label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="an ImageFolder tree (default: make one in a temporary folder)")
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--images-per-class", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        if args.root is None:
            make_image_folder(root, args.classes, args.images_per_class, size=96)
        pipe = (
            fl.from_files(root, labels="parent")
            .shuffle(seed=0)
            .map(augment)  # backend and worker count chosen for you; print(pipe) says which
            .batch(args.batch_size, drop_remainder=True)
            .map_batch(lambda b: (fv.normalize(b[0], fv.IMAGENET_MEAN, fv.IMAGENET_STD, layout="NCHW"), b[1]))
        )
        classes = len(pipe.source.class_names)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, classes),
        ).to(device)
        optimiser = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        with pipe:
            loader = pipe.torch(device=device if device == "cuda" else None)
            for epoch in range(args.epochs):
                losses = []
                for images, labels in loader:  # one epoch; a new shuffle each time
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    losses.append(loss.item())
                print(f"epoch {epoch}: {len(losses)} batches, mean loss {np.mean(losses):.3f}")
            print(pipe)
            print(pipe.stats())


if __name__ == "__main__":
    main()
