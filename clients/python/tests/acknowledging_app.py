"""An application that takes part in handoffs, for
host/tests/it/python_client.rs: it watches its node with ``acknowledges``,
answers each DRAINING with RELEASED after a short flush, and prints one JSON
line per step until every shard it held is lost. Not a pytest test."""

import json
import sys
import time

from chitin_client import Client, Draining, Lost, Subscribed

FLUSH = 0.2


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def main(api: str) -> None:
    with Client([api]) as client:
        watch = client.watch_ownership(acknowledges=True)
        first = next(watch)
        assert isinstance(first, Subscribed), first
        held = {lease.shard for lease in first.held}
        say(event="subscribed", held=sorted(held))
        lost = set()
        for event in watch:
            if isinstance(event, Draining):
                time.sleep(FLUSH)  # the application's last writes and flush
                ok = watch.released(event.shard, event.epoch)
                say(event="released", shard=event.shard, epoch=event.epoch, ok=ok, at=time.time())
            elif isinstance(event, Lost):
                say(event="lost", shard=event.shard, epoch=event.epoch, at=time.time())
                lost.add(event.shard)
                if held <= lost:
                    break
        watch.close()


if __name__ == "__main__":
    main(sys.argv[1])
