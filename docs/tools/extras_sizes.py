"""Installed MB of het-harness's core and of each extra, from pyproject.toml's requirements and the installed
distributions' RECORD files (this environment holds them all): the dependency closure of the core; for each extra,
its closure minus the core's (what `pip install "het-harness[extra]"` adds to a core install).

Usage: ``python docs/tools/extras_sizes.py pyproject.toml`` in an environment where every extra is installed
(``pip install -e ".[test,docs]"``); the table is on docs/results.md.
"""
import importlib.metadata as md
import os
import re
import sys
import tomllib

from packaging.requirements import Requirement


def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()


dists = {canon(d.metadata["Name"]): d for d in md.distributions()}


def size(name):
    d, total = dists[name], 0
    for f in d.files or []:
        p = d.locate_file(f)
        if os.path.isfile(p):
            total += os.path.getsize(p)
    return total


def closure(reqs):
    seen, visited, todo = set(), set(), [Requirement(r) for r in reqs]
    while todo:
        req = todo.pop()
        n, ex = canon(req.name), tuple(sorted(req.extras))
        if (n, ex) in visited:
            continue
        visited.add((n, ex))
        if n not in dists:
            print("  (not installed here:", n, ")", file=sys.stderr)
            continue
        seen.add(n)
        for r in dists[n].requires or []:
            sub = Requirement(r)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("",) + ex):
                todo.append(sub)
    return seen


project = tomllib.load(open(sys.argv[1], "rb"))["project"]
opt = project["optional-dependencies"]


def expand(reqs):  # het-harness[a,b] inside an extra: those extras' requirements
    out = []
    for r in reqs:
        req = Requirement(r)
        if canon(req.name) == "het-harness":
            for e in req.extras:
                out += expand(opt[e])
        else:
            out.append(r)
    return out


MB = 1e6
core = closure(project["dependencies"])
total = sum(size(n) for n in core)
torchish = {n for n in core if n.startswith(("torch", "nvidia-", "triton", "cuda-"))}
print(f"core: {total / MB:,.0f} MB, {len(core)} distributions; without torch, torchvision, triton and the NVIDIA "
      f"libraries: {sum(size(n) for n in core - torchish) / MB:,.0f} MB")
print("  largest:", ", ".join(f"{n} {size(n) / MB:.0f}" for n in sorted(core, key=size, reverse=True)[:6]))
print("  largest besides torch:", ", ".join(f"{n} {size(n) / MB:.0f}" for n in sorted(core - torchish, key=size, reverse=True)[:8]))
for extra in opt:
    if extra == "prepare":
        continue
    add = closure(expand(opt[extra])) - core
    print(f"[{extra}] +{sum(size(n) for n in add) / MB:,.0f} MB: " +
          ", ".join(f"{n} {size(n) / MB:.1f}" for n in sorted(add, key=size, reverse=True)[:9]))
