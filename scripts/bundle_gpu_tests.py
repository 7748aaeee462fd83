#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The `gpu`-labelled tests of a CUDA build as a ctest file that runs on another machine (scripts/device-check.sh
bundle): every executable a test runs from the build folder is copied into BUNDLE/bin, and the commands, working
folders and source-tree paths become placeholders (@BUILD@ for the bundle's folder, @ROOT@ for the checkout) that
the GPU machine fills in. Reads `ctest -L gpu --show-only=json-v1`, so that a new GPU test needs no change here.

Usage: bundle_gpu_tests.py TESTS_JSON BUILD_DIR SOURCE_DIR BUNDLE_DIR; prints the executables copied, one a line."""
import json
import os
import shutil
import sys


def bracket(text):
    """A CMake bracket argument: taken literally, whatever it holds."""
    fence = "="
    while "]" + fence + "]" in text:
        fence += "="
    return "[" + fence + "[" + text + "]" + fence + "]"


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: bundle_gpu_tests.py TESTS_JSON BUILD_DIR SOURCE_DIR BUNDLE_DIR")
    tests_json, build, source, bundle = sys.argv[1:]
    build, source = os.path.realpath(build), os.path.realpath(source)
    os.makedirs(os.path.join(bundle, "bin"), exist_ok=True)
    copied = {}

    def bundled(path):
        """An executable of the build folder, copied once into the bundle's bin/."""
        name = os.path.basename(path)
        if name in copied and copied[name] != path:
            sys.exit(f"two executables named {name}: {copied[name]} and {path}")
        if name not in copied:
            shutil.copy2(path, os.path.join(bundle, "bin", name))
            copied[name] = path
        return "@BUILD@/bin/" + name

    def rewrite(argument):
        # -DNAME=path and plain paths alike: an executable in the build folder is bundled; any other path into the
        # build folder (a working folder) becomes the bundle's work/; the source tree becomes the checkout there.
        prefix, _, path = argument.rpartition("=") if argument.startswith("-D") else ("", "", argument)
        prefix = prefix + "=" if prefix else ""
        if path.startswith(build + os.sep) and os.path.isfile(path) and os.access(path, os.X_OK):
            return prefix + bundled(path)
        if path == build or path.startswith(build + os.sep):
            return prefix + "@BUILD@/work"
        if path == source or path.startswith(source + os.sep):
            return prefix + "@ROOT@" + path[len(source):]
        if os.path.isabs(path) and os.path.basename(path) in ("cmake", "ctest"):
            return prefix + os.path.basename(path)  # found on the GPU machine's PATH
        return argument

    lines = []
    for test in json.load(open(tests_json))["tests"]:
        command = [rewrite(argument) for argument in test.get("command", [])]
        if not command:
            sys.exit(f"test {test['name']} has no command")
        lines.append("add_test(" + " ".join(bracket(part) for part in [test["name"]] + command) + ")")
        properties = []
        for prop in test.get("properties", []):
            value = prop["value"]
            if prop["name"] == "WORKING_DIRECTORY":
                value = rewrite(value)
            elif isinstance(value, list):
                value = ";".join(rewrite(item) if isinstance(item, str) else str(item) for item in value)
            properties.append(prop["name"] + " " + bracket(str(value)))
        if properties:
            lines.append("set_tests_properties(" + bracket(test["name"]) + " PROPERTIES " + " ".join(properties) + ")")
    with open(os.path.join(bundle, "CTestTestfile.cmake"), "w") as out:
        out.write("# The gpu-labelled tests of a CUDA build (scripts/bundle_gpu_tests.py).\n")
        out.write("\n".join(lines) + "\n")
    for name in sorted(copied):
        print(os.path.join(bundle, "bin", name))


if __name__ == "__main__":
    main()
