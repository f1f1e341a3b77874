#!/usr/bin/python3
"""Converts scikit-learn's bundled 8x8 hand-written digits into data/digits.npz.

Run once by hand (the result is committed):  /usr/bin/python3 tools/make-digits.py
Reads the copy that ships inside scikit-learn (no network).  Writes an
uncompressed .npz (a zip of .npy members, "stored", no deflate) so that simple
readers can load it:
    images  uint8  (1797, 64)   pixel values 0..16, row-major 8x8
    labels  uint8  (1797,)      digit 0..9
"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "digits.npz")
    d = load_digits()
    images = d.data.astype(np.uint8)
    labels = d.target.astype(np.uint8)
    assert images.shape == (1797, 64) and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 16
    assert (images == d.data).all() and (labels == d.target).all()
    np.savez(out, images=images, labels=labels)
    print(f"wrote {out}: images {images.shape} {images.dtype}, labels {labels.shape} {labels.dtype}")


if __name__ == "__main__":
    main()
