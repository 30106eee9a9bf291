#!/usr/bin/python3
"""Checks that docs/config.md documents exactly the config keys aggswitch accepts.

The loader (config/loader.cc) holds its key tree in code, without
descriptions, so the reference in docs/config.md is written by hand. This
test keeps the two from drifting apart. It learns the whole tree of keys
from the real binary: `aggswitch --config FILE --check-config` reports a key
it does not know as

    FILE:LINE:COLUMN: some.path.bogus: unknown key "bogus"; expected one of: a, b, c

so a config that puts a bogus key into a map lists that map's keys. Every
key found is probed in turn with a map holding a bogus key: a map answers
with its own keys, a list with "expected a list, got a map" (then a list of
one such map tells whether its items are maps), anything else is a leaf.
All probes of one depth go into one config file; every error is parsed and
only those at the probed paths are read.

The documented keys are the key column of every table in docs/config.md,
written as in the reference: `eal.lcores`, `ports[].name`,
`aggregation.jobs[].upstream.node`. A later name in the same cell without
a dot (`ports[].rx_descriptors`, `tx_descriptors`) is a sibling of the
first.

Fails, naming them, on keys the loader accepts that the doc does not
document (a map or list of maps counts as documented when it has a row of
its own or any key below it has one) and on documented keys the loader
does not accept.

    /usr/bin/python3 config/reference_test.py build/tools/aggswitch/aggswitch docs/config.md
"""

import json
import os
import re
import subprocess
import sys
import tempfile

BOGUS = "reference_test_bogus_key"
LIST = "[]"  # a path segment: the items of a list

# FILE:LINE:COLUMN: PATH: MESSAGE (PATH absent for errors about the whole file).
ERROR_LINE = re.compile(r"^.*?:\d+:\d+: (?:(?P<path>[^\s:]+): )?(?P<message>.*)$")
UNKNOWN_KEY = re.compile(r'^unknown key "' + BOGUS + r'"; expected one of: (?P<keys>.*)$')


def path_text(path, index=False):
    """('ports', '[]', 'faults') as the loader prints it (ports[0].faults) or as the doc writes it (ports[].faults)."""
    out = ""
    for segment in path:
        if segment == LIST:
            out += "[0]" if index else "[]"
        else:
            out += ("." if out else "") + segment
    return out


def insert(tree, path, value):
    """Puts `value` at `path` in the probe config `tree`; a list is a list of one map."""
    name, rest = path[0], path[1:]
    if not rest:
        tree[name] = value
        return
    if rest[0] == LIST:
        items = tree.setdefault(name, [{}])
        if len(rest) == 1:
            raise AssertionError("a probe goes into a list's item, not the list: " + path_text(path))
        insert(items[0], rest[1:], value)
    else:
        insert(tree.setdefault(name, {}), rest, value)


def run_probe(aggswitch, tree, workdir):
    """Runs --check-config on `tree` (JSON is YAML) and returns {path: [messages]}."""
    config = os.path.join(workdir, "probe.yaml")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(tree, f)
    result = subprocess.run([aggswitch, "--config", config, "--check-config"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=60, check=False)
    errors = {}
    for line in (result.stderr + result.stdout).splitlines():
        if not line.startswith(config + ":"):
            continue
        match = ERROR_LINE.match(line)
        if match:
            errors.setdefault(match.group("path") or "", []).append(match.group("message"))
    return errors, result


def unknown_key_list(errors, path_at):
    """The keys the map at `path_at` takes, if the bogus key was reported there."""
    bogus_at = (path_at + "." if path_at else "") + BOGUS
    for message in errors.get(bogus_at, []):
        match = UNKNOWN_KEY.match(message)
        if match:
            return [key.strip() for key in match.group("keys").split(",")]
    return None


def discover(aggswitch):
    """{doc path text: kind}, kind one of map, list of maps, leaf, list."""
    kinds = {}
    children = {}
    # Probes of the next round: (path, what) with what "map" (a map holding
    # the bogus key at path) or "items" (a list of one such map at path).
    pending = [((), "map")]
    with tempfile.TemporaryDirectory(prefix="config_reference.") as workdir:
        for _ in range(32):
            if not pending:
                break
            tree = {}
            for path, what in pending:
                if not path:
                    tree[BOGUS] = 1
                elif what == "map":
                    insert(tree, path, {BOGUS: 1})
                else:
                    insert(tree, path, [{BOGUS: 1}])
            errors, result = run_probe(aggswitch, tree, workdir)
            if not errors:
                sys.exit("no errors parsed from aggswitch --check-config (exit %d):\n%s%s"
                         % (result.returncode, result.stdout, result.stderr))
            next_round = []
            for path, what in pending:
                if what == "map":
                    keys = unknown_key_list(errors, path_text(path, index=True))
                    if keys is not None:
                        if path:
                            kinds[path] = "map"
                        children[path] = keys
                        next_round += [(path + (key,), "map") for key in keys]
                    elif any(m.startswith("expected a list")
                             for m in errors.get(path_text(path, index=True), [])):
                        next_round.append((path, "items"))
                    elif not path:
                        sys.exit("the root did not report the bogus key; aggswitch said:\n"
                                 + result.stderr)
                    else:
                        kinds[path] = "leaf"
                else:
                    item = path + (LIST,)
                    keys = unknown_key_list(errors, path_text(item, index=True))
                    if keys is not None:
                        kinds[path] = "list of maps"
                        children[item] = keys
                        next_round += [(item + (key,), "map") for key in keys]
                    else:
                        kinds[path] = "list"
            pending = next_round
        else:
            sys.exit("the key tree is deeper than 32 levels: a probe loops")
    return {path_text(path): kind for path, kind in kinds.items()}


def documented_keys(doc_path):
    """{key: line number} from the key column of every table of the doc."""
    keys = {}
    tables = 0
    key_column = None
    with open(doc_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            key_column = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if key_column is None:
            # A table's header row; the separator row follows it.
            key_column = cells.index("key") if "key" in cells else -1
            if key_column >= 0:
                tables += 1
            continue
        if key_column < 0 or set(line) <= set("|-: "):
            continue
        names = re.findall(r"`([^`]+)`", cells[key_column])
        if not names:
            sys.exit("%s:%d: no `key` in the key column" % (doc_path, number))
        first = names[0]
        parent = first[:max(first.rfind("."), 0)]
        for name in names:
            if name != first and "." not in name and parent:
                name = parent + "." + name
            keys.setdefault(name, number)
    if tables == 0:
        sys.exit("%s: no table with a key column" % doc_path)
    return keys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: reference_test.py AGGSWITCH DOCS/CONFIG.MD")
    aggswitch, doc = sys.argv[1], sys.argv[2]
    accepted = discover(aggswitch)
    documented = documented_keys(doc)

    def covered(key):
        if key in documented:
            return True
        # A container is documented through the keys below it.
        return accepted[key] in ("map", "list of maps") and any(
            d.startswith(key + ".") or d.startswith(key + "[].") for d in documented)

    undocumented = sorted(key for key in accepted if not covered(key))
    unknown = sorted(documented.items(), key=lambda item: item[1])
    unknown = [(key, line) for key, line in unknown if key not in accepted]
    leaves = sum(1 for kind in accepted.values() if kind in ("leaf", "list"))
    print("aggswitch accepts %d keys (%d leaves); %s documents %d"
          % (len(accepted), leaves, doc, len(documented)))
    for key in undocumented:
        print("undocumented: %s (%s), accepted by aggswitch but in no table of %s"
              % (key, accepted[key], doc))
    for key, line in unknown:
        print("%s:%d: documented key %s is not accepted by aggswitch" % (doc, line, key))
    if undocumented or unknown:
        print("FAIL: %d undocumented, %d documented but not accepted"
              % (len(undocumented), len(unknown)))
        return 1
    print("ok: every accepted key is documented and every documented key is accepted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
