"""Checks a `trellis plan --picture` SVG against the search's --json."""

import json
import re
import sys
import xml.etree.ElementTree as ET

svg = ET.parse(sys.argv[1]).getroot()
with open(sys.argv[2]) as f:
    search = json.load(f)
ns = {"svg": "http://www.w3.org/2000/svg"}
print("well-formed SVG" if svg.tag.endswith("svg") else "not SVG")


def of_class(tag, name):
    return [e for e in svg.iter("{http://www.w3.org/2000/svg}" + tag)
            if e.get("class") == name]


candidates = of_class("circle", "candidate")
# Each candidate priced is drawn once (escalations count as evaluated
# but a candidate shows its best), so there are at most as many points as
# evaluations and at least one per plan shown.
print("a point per priced candidate:",
      len(search["plans"]) <= len(candidates) <= search["candidates_evaluated"])
chosen = of_class("circle", "chosen")
best = search["plans"][0]["plan"]
labels = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
print(f"feasible front: {len(of_class('path', 'front'))}, chosen: "
      f"{len(chosen)}, the best plan's: {any(best in l for l in labels)}")
mesh = search["plans"][0]["mesh"]
microbatches = search["plans"][0]["compile_options"]["microbatches"]
chunks = search["plans"][0]["compile_options"].get("chunks", 1)
actions = of_class("rect", "action")
forward = [a for a in actions if re.search(r": F\d", a.find("svg:title", ns).text)]
# 1F1B and GPipe split no backward; ZB-H1 adds a weight-gradient action.
print("actions: one per forward and backward of every micro-batch on each "
      "rank:", len(forward) == mesh["pp"] * microbatches * chunks and
      len(actions) >= 2 * len(forward))
