"""Copts for a target whose files include LibTorch headers: they start from
the precompiled LibTorch headers (third_party/BUILD: torch_pch), which the
target gets through its //third_party:libtorch dependency."""

TORCH_PCH_COPTS = [
    "-include",
    "third_party/torch_pch.h",
]
