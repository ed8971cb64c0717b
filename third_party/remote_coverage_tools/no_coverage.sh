#!/bin/sh
echo "coverage is not available in herd's offline Bazel build" >&2
exit 1
