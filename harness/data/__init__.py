"""Data: sources (real readers), synthetic label noise, transforms, seeded augmentation."""

from harness.data.sources import DataConfig, ImageDataset, build_split

__all__ = ["DataConfig", "ImageDataset", "build_split"]
