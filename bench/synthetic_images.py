#!/usr/bin/env python3
"""Writes a synthetic image set in Fashion-MNIST's format (bench/herdbench/synthetic_images.py).

Usage: bench/synthetic_images.py DIR [--train 60000] [--test 10000] [--seed 1] [--gzip]
"""
from herdbench.synthetic_images import main

if __name__ == "__main__":
    main()
