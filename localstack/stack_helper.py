"""Small helpers for stack.sh (kept out of the shell script for readability).

  freeport WANT START          print WANT if free (exit 3 if taken), else the first free port >= START
  health KIND URL TIMEOUT [PID] wait until the emulator answers; exit 1 on timeout or if PID died
  bootstrap URL                create the bucket and queues (idempotent); print their env lines

Only `bootstrap` needs boto3, so it runs with the emulator's venv; the rest runs on any python3.
"""
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

BUCKET = "agent-platform-local"
QUEUES = {"SQS_INGEST": "agent-platform-ingest", "SQS_MEMORY": "agent-platform-memory"}


def port_free(port):
    # SO_REUSEADDR like the servers themselves: TIME_WAIT leftovers don't count, listeners do.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def freeport(want, start):
    if want:
        if not port_free(int(want)):
            return 3
        print(want)
        return 0
    port = int(start)
    while not port_free(port):
        port += 1
    print(port)
    return 0


def healthy(kind, url):
    try:
        path = "/_localstack/health" if kind == "localstack" else "/moto-api/"
        with urllib.request.urlopen(url + path, timeout=2) as r:
            if kind != "localstack":
                return True
            services = json.load(r).get("services", {})
            return services.get("s3") == "running" and services.get("sqs") == "running"
    except urllib.error.HTTPError:
        return kind != "localstack"  # moto: any HTTP answer means it is serving
    except (OSError, ValueError):
        return False


def health(kind, url, timeout, pid=None):
    deadline = time.monotonic() + float(timeout)
    while True:
        if healthy(kind, url):
            return 0
        if pid and not os.path.exists(f"/proc/{pid}"):
            print(f"{kind} (pid {pid}) exited", file=sys.stderr)
            return 1
        if time.monotonic() >= deadline:
            return 1
        time.sleep(0.3)


def bootstrap(url):
    import boto3
    from botocore.config import Config

    kw = dict(endpoint_url=url, region_name="us-east-1",
              aws_access_key_id="test", aws_secret_access_key="test")
    s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}), **kw)
    sqs = boto3.client("sqs", **kw)

    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    print(f"S3_BUCKET={BUCKET}")

    def queue(name, **attrs):
        # get-or-create, then set attributes: create_queue fails when attributes differ
        try:
            q = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            q = sqs.create_queue(QueueName=name)["QueueUrl"]
        if attrs:
            sqs.set_queue_attributes(QueueUrl=q, Attributes={k: str(v) for k, v in attrs.items()})
        return q

    for key, name in QUEUES.items():
        dlq = queue(name + "-dlq", MessageRetentionPeriod=1209600)
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url_ = queue(name, VisibilityTimeout=60,
                     RedrivePolicy=json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3}))
        print(f"{key}_QUEUE_URL={url_}")
        print(f"{key}_DLQ_URL={dlq}")
    return 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    sys.exit({"freeport": freeport, "health": health, "bootstrap": bootstrap}[cmd](*args))
