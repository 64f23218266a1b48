# Prints the pipeline facts of a plan, one per line: the mesh, the stages
# holding each parameter, and per stage the transfers (op, peer, shape of
# the buffer, the receive a send completes with) and the optimizer updates
# it runs. Usage: summarize_plan.py P
import json
import sys

plan = json.load(open(sys.argv[1]))
buffers = plan["buffers"]
print("mesh", " ".join(f'{a["name"]}={a["size"]}' for a in plan["mesh"]))
print("pipeline_axis", plan.get("pipeline_axis"))
for argument in plan["arguments"]:
    if argument["role"] in ("param", "input"):
        print(argument["role"], argument["param"], "stages",
              argument.get("stages"))
for stage in plan["stages"]:
    program = stage["program"]
    for instruction in program:
        if instruction["op"] in ("send", "recv"):
            buffer = (instruction["inputs"] + instruction["outputs"])[0]
            attrs = instruction["attrs"]
            print(f'stage {stage["stage"]}: {instruction["op"]}',
                  f'peer {attrs["peer"]}',
                  f'axes {",".join(attrs["axes"])}',
                  "shape", buffers[buffer]["shape"],
                  *(["completes with the recv of channel",
                     attrs["complete_with"]] if "complete_with" in attrs
                    else []))
    updates = sum(1 for i in program if i["op"] == "adamw")
    print(f'stage {stage["stage"]}: {updates} adamw')
