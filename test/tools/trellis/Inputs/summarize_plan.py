# Prints the pipeline facts of a plan, one per line: the mesh, the stages
# holding each parameter and input, and per stage its schedule, then per
# action program its transfers (op, peer, shape of the buffer, the receive
# a send completes with), its accumulations into step totals (values, and
# products added as they are made) and the optimizer updates it runs. Usage: summarize_plan.py P
import json
import sys

plan = json.load(open(sys.argv[1]))
buffers = plan["buffers"]
print("mesh", " ".join(f'{a["name"]}={a["size"]}' for a in plan["mesh"]))
print("pipeline_axis", plan.get("pipeline_axis"))
print("micro_batches", plan.get("micro_batches"))
for argument in plan["arguments"]:
    if argument["role"] in ("param", "input"):
        print(argument["role"], argument["param"], "stages",
              argument.get("stages"))
for stage in plan["stages"]:
    where = f'stage {stage["stage"]}'
    print(f'{where}: schedule', " ".join(stage["schedule"]))
    for program in stage["programs"]:
        name = f'{where} {program["name"]}'
        for instruction in program["program"]:
            if instruction["op"] in ("send", "recv"):
                buffer = (instruction["inputs"] + instruction["outputs"])[0]
                attrs = instruction["attrs"]
                print(f'{name}: {instruction["op"]}',
                      f'peer {attrs["peer"]}',
                      f'axes {",".join(attrs["axes"])}',
                      "shape", buffers[buffer]["shape"])
        for op in ("accumulate", "matmul_accumulate", "adamw"):
            count = sum(1 for i in program["program"] if i["op"] == op)
            if count:
                print(f'{name}: {count} {op}')
