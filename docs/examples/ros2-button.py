#!/usr/bin/env python3
"""Start and end fleet agent episodes from the robot: a ROS 2 node, or one press from a script.

Node mode (the default) subscribes to a std_msgs/msg/String topic (/fleet/episode unless
--topic says otherwise) whose data is one of start, finish, fail, discard, and sends that verb
to the agent's control socket, logging the agent's answer. A teleop pedal, a joystick mapping
or a UI publishes the word:

    ros2 topic pub --once /fleet/episode std_msgs/msg/String "{data: start}"

    source /opt/ros/humble/setup.bash
    python3 /usr/share/doc/fleet-agent/examples/ros2-button.py --data-dir /var/lib/fleet-agent

Press mode needs no ROS: `--press start|finish|fail|discard` sends one verb, prints the agent's
answer (a JSON object) on stdout and exits 0, or prints the refusal on stderr and exits 1 (the
agent refused: e.g. `invalid_state` for a start while recording) or 2 (a usage error). Bind it
to a GPIO script or a keyboard shortcut.

The control socket is `<data dir>/agent.sock` (`--socket` names it directly; FLEET_AGENT_SOCKET
and FLEET_AGENT_DATA_DIR are read as fleet-agent reads them). It is mode 0600, owned by the user
the agent runs as (`fleet-agent` for the packaged service): run this as that user
(`sudo runuser -u fleet-agent -- python3 ...`). The protocol is newline-delimited JSON, one
answer line per request line, in order:

    -> {"id": 1, "op": "episode.start"}
    <- {"id": 1, "ok": true, "result": {"episode_id": "...", ...}}
    <- {"id": 1, "ok": false, "error": {"code": "invalid_state", "message": "..."}}

Standard library only, Python 3.8 or newer; rclpy is imported in node mode only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any, Dict, Tuple

VERBS = ("start", "finish", "fail", "discard")
DEFAULT_DATA_DIR = "/var/lib/fleet-agent"
# A finish waits for the recorder to close its files (rosbag2 writes its summary on SIGINT), so
# the answer may take as long as the recorder's stop_timeout_ms.
ANSWER_TIMEOUT_S = 60.0


class AgentUnreachable(Exception):
    pass


def socket_path(opts: argparse.Namespace) -> str:
    if opts.socket:
        return opts.socket
    return os.path.join(opts.data_dir or os.environ.get("FLEET_AGENT_DATA_DIR") or DEFAULT_DATA_DIR, "agent.sock")


def send(path: str, verb: str, request_id: int) -> Tuple[bool, Dict[str, Any]]:
    """One request on a fresh connection (the agent may have restarted since the last press):
    (True, result) or (False, {code, message})."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(ANSWER_TIMEOUT_S)
    try:
        try:
            conn.connect(path)
        except OSError as e:
            hint = " (is fleet-agent running?)" if isinstance(e, (FileNotFoundError, ConnectionRefusedError)) else " (run this as the user the agent runs as: the socket is mode 0600)" if isinstance(e, PermissionError) else ""
            raise AgentUnreachable(f"cannot reach the agent at {path}: {e.strerror or e}{hint}")
        conn.sendall((json.dumps({"id": request_id, "op": f"episode.{verb}"}) + "\n").encode())
        data = b""
        while b"\n" not in data:
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                raise AgentUnreachable(f"the agent at {path} did not answer episode.{verb} within {ANSWER_TIMEOUT_S:g} s")
            if not chunk:
                raise AgentUnreachable(f"the agent at {path} closed the connection without answering episode.{verb}")
            data += chunk
    finally:
        conn.close()
    try:
        reply = json.loads(data.split(b"\n", 1)[0])
    except ValueError as e:
        raise AgentUnreachable(f"the agent at {path} answered something that is not JSON: {e}")
    if reply.get("ok") is True and isinstance(reply.get("result"), dict):
        return True, reply["result"]
    error = reply.get("error")
    if reply.get("ok") is False and isinstance(error, dict):
        return False, {"code": str(error.get("code")), "message": str(error.get("message"))}
    raise AgentUnreachable(f"the agent at {path} answered {data[:200]!r}, not {{ok, result|error}}")


def press(opts: argparse.Namespace) -> int:
    path = socket_path(opts)
    try:
        ok, body = send(path, opts.press, 1)
    except AgentUnreachable as e:
        print(f"ros2-button: {e}", file=sys.stderr)
        return 1
    if not ok:
        print(f"ros2-button: the agent refused episode.{opts.press}: {body['code']}: {body['message']}", file=sys.stderr)
        return 1
    print(json.dumps(body))
    return 0


def run_node(opts: argparse.Namespace) -> int:
    try:
        import rclpy
        from rclpy.node import Node
        from std_msgs.msg import String
    except ImportError as e:
        print(f"ros2-button: node mode needs ROS 2's rclpy and std_msgs ({e}); source the ROS 2 setup file first, e.g. source /opt/ros/humble/setup.bash, or use --press", file=sys.stderr)
        return 2
    path = socket_path(opts)

    class EpisodeButton(Node):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__("fleet_episode_button")
            self.request_id = 0
            # Depth 10: presses are rare; a burst is answered in order, one at a time.
            self.create_subscription(String, opts.topic, self.on_message, 10)
            self.get_logger().info(f"sending {'|'.join(VERBS)} from {opts.topic} to the agent at {path}")

        def on_message(self, msg: Any) -> None:
            verb = msg.data.strip().lower()
            if verb not in VERBS:
                self.get_logger().warning(f"ignored {msg.data!r} on {opts.topic}: not one of {', '.join(VERBS)}")
                return
            self.request_id += 1
            # Blocking in the callback is deliberate: presses are handled one at a time, in order,
            # as the agent answers them; the node has nothing else to do meanwhile.
            try:
                ok, body = send(path, verb, self.request_id)
            except AgentUnreachable as e:
                self.get_logger().error(str(e))
                return
            if ok:
                self.get_logger().info(f"episode.{verb}: {json.dumps(body)}")
            else:
                # A refusal is the agent's answer, not a fault: a second start while recording,
                # a finish while idle.
                self.get_logger().warning(f"the agent refused episode.{verb}: {body['code']}: {body['message']}")

    try:
        from rclpy.executors import ExternalShutdownException
    except ImportError:  # before Galactic, a SIGTERM ends spin without it

        class ExternalShutdownException(Exception):  # type: ignore[no-redef]
            pass

    rclpy.init()
    node = EpisodeButton()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="ros2-button.py", description="Start and end fleet agent episodes: a ROS 2 node on a String topic, or one --press.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--socket", default=os.environ.get("FLEET_AGENT_SOCKET"), help="the agent's control socket (default <data dir>/agent.sock)")
    where.add_argument("--data-dir", help=f"the agent's data directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--press", choices=VERBS, help="send this one verb and exit (no ROS needed)")
    parser.add_argument("--topic", default="/fleet/episode", help="node mode: the std_msgs/msg/String topic to listen on (default /fleet/episode)")
    opts = parser.parse_args()
    return press(opts) if opts.press else run_node(opts)


if __name__ == "__main__":
    sys.exit(main())
