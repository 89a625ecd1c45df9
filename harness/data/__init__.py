"""Data: sources (real readers), synthetic label noise, transforms, seeded augmentation."""

from harness.data.config import DataConfig
from harness.data.dataset import ImageDataset
from harness.data.sources import build_split

__all__ = ["DataConfig", "ImageDataset", "build_split"]
