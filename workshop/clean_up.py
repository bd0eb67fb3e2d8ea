"""After the workshop: remove the learners' Unix accounts the hub made (sudo make workshop-clean).

    python workshop/clean_up.py [--homes workshop/.run/homes] [--runtime DIR] [--keep-homes]

An account is a learner's when its home lies under the hub's homes folder (WORKSHOP_HOMES):
exactly the accounts jupyterhub_config.py made with useradd, never one the machine had before.
Each is removed with `userdel` (its home too, unless --keep-homes), with its kernels' socket
folder, in the runtime folder the hub was started with (WORKSHOP_RUNTIME: the hub records it, and its
homes, in its state folder, so a clean-up without the same variables still finds them).  Collect and grade first (make collect, make autograde): the work is in those homes.
Refuses while any of those users still runs a process (stop the hub first: Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOM_RECORD = "room.json"      # in the hub's state folder: the homes and kernel folders it was started with


def room_record(state: Path) -> dict:
    """{"homes": ..., "runtime": ...} as the hub last started (jupyterhub_config.py writes it), else {}."""
    try:
        return json.loads((state / ROOM_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def learner_accounts(homes: Path) -> list[pwd.struct_passwd]:
    homes = homes.resolve()
    return sorted((a for a in pwd.getpwall() if a.pw_uid != 0 and Path(a.pw_dir).is_relative_to(homes)),
                  key=lambda a: a.pw_name)


def running(uids: set[int]) -> list[str]:
    """'NAME (pid N)' of every process owned by one of `uids` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    found.append(f"{pwd.getpwuid(entry.stat().st_uid).pw_name} (pid {entry.name})")
            except (FileNotFoundError, KeyError):
                continue
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python workshop/clean_up.py", description=__doc__.split("\n")[0])
    parser.add_argument("--state", type=Path, default=Path(os.environ.get("WORKSHOP_STATE") or HERE / ".run" / "hub"),
                        help="the hub's state folder, where it recorded its homes and kernel folders")
    parser.add_argument("--homes", type=Path, help="the hub's homes (default: WORKSHOP_HOMES, else as the hub "
                                                   "recorded it, else workshop/.run/homes)")
    parser.add_argument("--runtime", type=Path, help="the kernels' socket folders (default: WORKSHOP_RUNTIME, "
                                                     "else as the hub recorded it, else /run/workshop-kernels)")
    parser.add_argument("--keep-homes", action="store_true", help="remove the accounts, keep their homes")
    args = parser.parse_args(argv)
    record = room_record(args.state)
    args.homes = Path(args.homes or os.environ.get("WORKSHOP_HOMES") or record.get("homes") or HERE / ".run" / "homes")
    runtime = Path(args.runtime or os.environ.get("WORKSHOP_RUNTIME") or record.get("runtime")
                   or "/run/workshop-kernels")
    if os.getuid() != 0:
        print("error: removing Unix users needs root: sudo make workshop-clean", file=sys.stderr)
        return 1
    accounts = learner_accounts(args.homes)
    busy = running({a.pw_uid for a in accounts})
    if busy:
        print(f"error: learners' processes still run ({', '.join(busy[:5])}): stop the hub (Ctrl-C) first",
              file=sys.stderr)
        return 1
    for account in accounts:
        command = ["userdel", account.pw_name] if args.keep_homes else ["userdel", "--remove", account.pw_name]
        out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode not in (0, 12):       # 12: the home could not be removed (already gone)
            print(f"error: {' '.join(command)}: {out.stderr.strip()}", file=sys.stderr)
            return 1
        shutil.rmtree(runtime / str(account.pw_uid), ignore_errors=True)
        print(f"removed {account.pw_name}" + ("" if args.keep_homes else f" and {account.pw_dir}"))
    print(f"{len(accounts)} learner accounts removed (homes under {args.homes.resolve()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
