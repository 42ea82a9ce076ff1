#!/usr/bin/env python3
"""Answer a fleet agent robot command with a ROS 2 service call or action goal.

An action in the agent's config (agent.yaml) runs this as its program:

    actions:
      go_home:
        shell: "source /opt/ros/humble/setup.bash && exec python3 /usr/share/doc/fleet-agent/examples/ros2-action.py service /go_home std_srvs/srv/Trigger"
      go_to_start:
        shell: "source /opt/ros/humble/setup.bash && exec python3 /usr/share/doc/fleet-agent/examples/ros2-action.py action /arm/go_to_start control_msgs/action/FollowJointTrajectory '{trajectory: ...}'"

The agent writes its request, {"command", "args", "robot_id", "cmd_id"}, on stdin. This runs
`ros2 service call NAME TYPE [REQUEST]` or `ros2 action send_goal NAME TYPE GOAL` (the ros2 CLI
on PATH), reads what ros2 prints, and answers as the agent's action contract asks:

  exit 0, a JSON object on stdout: the result
      {"service": NAME, "type": TYPE, "response": {...}, "success": true, "message": "..."}
      (success and message when the response has them), or
      {"action": NAME, "type": TYPE, "goal_id": "...", "status": "SUCCEEDED", "result": "<YAML text>"}
  exit 3, {"code", "message"} on stdout: the robot declines
      failed         the service answered success=False; the goal was ABORTED or CANCELED; no
                     answer in time after the request or goal reached the server
      invalid_state  no service or action server answered (is the robot's stack up?); the goal
                     was rejected. Nothing was asked of the robot.
  exit 1, the reason on stderr: ros2 is missing, failed, or printed what this does not read
  exit 2: a usage error

Everything ros2 prints is copied to stderr, which the agent logs; stdout holds only the answer.

--timeout (default 5 s) bounds the call. When it expires, ros2 gets SIGINT (send_goal then
cancels a goal that is still running), --cancel-grace seconds (default 2) to exit, then SIGKILL.
Keep timeout + cancel grace under the action's timeout_ms in agent.yaml (8 s by default): the
agent kills what is still running at its own timeout without a cancel, and answers action_timeout.

Standard library only, Python 3.8 or newer.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List, NoReturn, Optional

DECLINE_EXIT_CODE = 3
PROG = "ros2-action"


class Unreadable(Exception):
    """ros2 printed something this program does not understand."""


def log(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def answer(result: Dict[str, Any]) -> NoReturn:
    print(json.dumps(result), flush=True)
    sys.exit(0)


def decline(code: str, message: str) -> NoReturn:
    log(f"declined ({code}): {message}")
    print(json.dumps({"code": code, "message": message}), flush=True)
    sys.exit(DECLINE_EXIT_CODE)


def crash(reason: str) -> NoReturn:
    log(reason)
    sys.exit(1)


def read_request() -> Dict[str, Any]:
    """The agent's request; a person trying this by hand may give none (a terminal, or empty)."""
    if sys.stdin is None or sys.stdin.isatty():
        return {}
    text = sys.stdin.read()
    if not text.strip():
        return {}
    try:
        request = json.loads(text)
    except ValueError as e:
        crash(f"stdin is not the agent's JSON request: {e}")
    if not isinstance(request, dict):
        crash("stdin is not the agent's JSON request (not an object)")
    return request


class Run:
    """One ros2 process: its output lines as they come (copied to stderr), and how it ended."""

    def __init__(self, argv: List[str]) -> None:
        self.stdout: List[str] = []
        self.stderr: List[str] = []
        self.timed_out = False
        try:
            # stdin closed: ros2 reads its values from the command line, never from the agent's pipe.
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, errors="replace"
            )
        except FileNotFoundError:
            crash(f"{argv[0]} not found on PATH ({os.environ.get('PATH', '')}); source the ROS 2 setup file first, e.g. source /opt/ros/humble/setup.bash")
        except OSError as e:
            crash(f"{argv[0]} could not be started: {e}")
        self.readers = [self._copy(self.proc.stdout, self.stdout), self._copy(self.proc.stderr, self.stderr)]

    @staticmethod
    def _copy(pipe: Any, into: List[str]) -> threading.Thread:
        def run() -> None:
            for line in pipe:
                into.append(line.rstrip("\n"))
                print(line, end="" if line.endswith("\n") else "\n", file=sys.stderr, flush=True)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def wait(self, timeout: float, cancel_grace: float) -> Optional[int]:
        """ros2's exit code; on timeout, SIGINT first (so that send_goal cancels its goal), then SIGKILL."""
        try:
            code: Optional[int] = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.proc.send_signal(signal.SIGINT)
            try:
                code = self.proc.wait(timeout=cancel_grace)
            except subprocess.TimeoutExpired:
                log(f"ros2 did not exit within {cancel_grace:g} s of SIGINT; killing it")
                self.proc.kill()
                code = self.proc.wait()
        # A process ros2 left behind may hold the pipes open: what is read by now is the answer.
        for reader in self.readers:
            reader.join(timeout=1)
        return code

    def failure(self, what: str, code: Optional[int]) -> str:
        last = next((line.strip() for line in reversed(self.stderr) if line.strip()), "")
        return f"{what} exited with code {code}" + (f": {last}" if last else " and printed nothing on stderr")


# A rosidl message's repr is a Python expression: pkg.srv.Name_Response(field=value, ...), with
# nested messages as calls, sequences as lists, numpy arrays as array([...]). It is read with
# ast (no eval) into JSON: a message becomes an object of its fields.
def from_repr(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bytes):
            return list(value)
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = from_repr(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [from_repr(item) for item in node.elts]
    if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
        return node.id
    if isinstance(node, ast.Call):
        callee = dotted(node.func)
        if callee in ("array", "numpy.array") and node.args:
            # array('d', [1.0]) (a Python array the repr did not strip) or numpy's array([1.0], dtype=...).
            return from_repr(node.args[-1])
        if callee is not None and not node.args:
            return {kw.arg: from_repr(kw.value) for kw in node.keywords if kw.arg is not None}
    raise Unreadable(f"unexpected {type(node).__name__} in the response")


def dotted(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def parse_response(lines: List[str]) -> Dict[str, Any]:
    """The message after `response:` (call.py prints 'response:\\n%r\\n'), as an object of its fields."""
    try:
        start = len(lines) - 1 - lines[::-1].index("response:")
    except ValueError:
        raise Unreadable("ros2 printed no 'response:'")
    text = "".join(line for line in lines[start + 1 :] if line.strip())
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise Unreadable(f"the response is not a message repr ({e.msg}): {text[:200]}")
    fields = from_repr(tree.body)
    if not isinstance(fields, dict):
        raise Unreadable(f"the response is not a message: {text[:200]}")
    return fields


def call_service(name: str, type_: str, request: str, opts: argparse.Namespace) -> NoReturn:
    run = Run([opts.ros2, "service", "call", name, type_, request])
    code = run.wait(opts.timeout, opts.cancel_grace)
    out = run.stdout
    if run.timed_out:
        if not any(line.startswith("requester: making request:") for line in out):
            decline("invalid_state", f"no server for the service {name} answered within {opts.timeout:g} s (is the robot's stack running?); nothing was requested")
        decline("failed", f"the service {name} did not answer within {opts.timeout:g} s; the request was sent, so it may still act on it")
    if code != 0:
        crash(run.failure(f"ros2 service call {name} {type_}", code))
    try:
        response = parse_response(out)
    except Unreadable as e:
        crash(f"could not read the answer of ros2 service call {name}: {e}")
    result: Dict[str, Any] = {"service": name, "type": type_, "response": response}
    # std_srvs' Trigger and SetBool (and most robot services) answer success and a message.
    for key in ("success", "message"):
        if key in response:
            result[key] = response[key]
    if response.get("success") is False:
        message = response.get("message")
        decline("failed", f"{name}: {message}" if isinstance(message, str) and message else f"{name} answered success=False")
    answer(result)


STATUS_PREFIX = "Goal finished with status: "
ACCEPTED_PREFIX = "Goal accepted with ID: "


def result_text(lines: List[str]) -> str:
    """The YAML send_goal.py prints as 'Result:\\n    {yaml}' (only its first line indented)."""
    try:
        start = lines.index("Result:")
    except ValueError:
        return ""
    body = []
    for line in lines[start + 1 :]:
        if line.startswith(STATUS_PREFIX):
            break
        body.append(line)
    if body and body[0].startswith("    "):
        body[0] = body[0][4:]
    return "\n".join(body).strip("\n")


def send_goal(name: str, type_: str, goal: str, opts: argparse.Namespace) -> NoReturn:
    run = Run([opts.ros2, "action", "send_goal", name, type_, goal])
    code = run.wait(opts.timeout, opts.cancel_grace)
    out = run.stdout
    accepted = next((line[len(ACCEPTED_PREFIX) :].strip() for line in out if line.startswith(ACCEPTED_PREFIX)), None)
    if "Goal was rejected." in out:
        decline("invalid_state", f"the action server {name} rejected the goal")
    if run.timed_out:
        if accepted is None:
            if "Sending goal:" in out:
                decline("failed", f"the action server {name} did not answer the goal within {opts.timeout:g} s; it may still act on it")
            decline("invalid_state", f"no action server {name} answered within {opts.timeout:g} s (is the robot's stack running?); no goal was sent")
        canceled = "Goal canceled." in out
        decline(
            "failed",
            f"the goal {accepted} on {name} did not finish within {opts.timeout:g} s; "
            + ("it was canceled" if canceled else "ros2 was stopped without confirming a cancel, so it may still be running"),
        )
    if code != 0:
        crash(run.failure(f"ros2 action send_goal {name} {type_}", code))
    status = next((line[len(STATUS_PREFIX) :].strip() for line in reversed(out) if line.startswith(STATUS_PREFIX)), None)
    if status is None:
        crash(f"could not read the answer of ros2 action send_goal {name}: no '{STATUS_PREFIX.strip()}' line")
    text = result_text(out)
    if status != "SUCCEEDED":
        decline("failed", f"the goal on {name} finished {status}" + (f": {' '.join(text.split())[:500]}" if text else ""))
    answer({"action": name, "type": type_, "goal_id": accepted, "status": status, "result": text})


def main() -> None:
    parser = argparse.ArgumentParser(prog="ros2-action.py", description="Answer a fleet agent robot command with a ROS 2 service call or action goal.")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds the call may take (default 5)")
    parser.add_argument("--cancel-grace", type=float, default=2.0, help="seconds ros2 gets after SIGINT to cancel and exit (default 2)")
    parser.add_argument("--ros2", default="ros2", help="the ros2 CLI (default: ros2 on PATH)")
    kinds = parser.add_subparsers(dest="kind", metavar="service|action")
    kinds.required = True
    service = kinds.add_parser("service", help="ros2 service call NAME TYPE [REQUEST]")
    service.add_argument("name", help="the service, e.g. /go_home")
    service.add_argument("type", help="its type, e.g. std_srvs/srv/Trigger")
    service.add_argument("request", nargs="?", default="{}", help="the request in YAML (default {})")
    action = kinds.add_parser("action", help="ros2 action send_goal NAME TYPE [GOAL]")
    action.add_argument("name", help="the action, e.g. /arm/go_to_start")
    action.add_argument("type", help="its type, e.g. control_msgs/action/FollowJointTrajectory")
    action.add_argument("goal", nargs="?", default="{}", help="the goal in YAML (default {})")
    opts = parser.parse_args()
    if not opts.timeout > 0 or not opts.cancel_grace > 0:
        parser.error("--timeout and --cancel-grace are positive numbers of seconds")

    request = read_request()
    who = str(request.get("command", "(no request on stdin)"))
    if request.get("cmd_id"):
        who += " " + str(request["cmd_id"])
    verb = "service call" if opts.kind == "service" else "action send_goal"
    log(f"{who}: ros2 {verb} {opts.name} {opts.type}")
    if opts.kind == "service":
        call_service(opts.name, opts.type, opts.request, opts)
    send_goal(opts.name, opts.type, opts.goal, opts)


if __name__ == "__main__":
    main()
