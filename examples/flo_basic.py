#!/usr/bin/env python3
"""Basic example of using the Flo Python SDK.

This example demonstrates:
- Connecting to a Flo server
- Queue operations (enqueue, dequeue)
"""

import asyncio
import sys

from flo_redis import DequeueOptions, EnqueueOptions, FloClient, NotFoundError


async def queue_example(client: FloClient) -> None:
    """Demonstrate Queue operations."""
    print("\n=== Queue Operations ===\n")

    queue_name = "example-tasks"

    # Enqueue messages
    print("Enqueueing messages...")
    seq1 = await client.queue.enqueue(queue_name, b'{"task": "task1"}')
    print(f"  Enqueued task1 with seq={seq1}")

    seq2 = await client.queue.enqueue(
        queue_name,
        b'{"task": "task2"}',
        EnqueueOptions(priority=10),  # Lower is taken first; default 0
    )
    print(f"  Enqueued task2 (priority=10) with seq={seq2}")

    seq3 = await client.queue.enqueue(queue_name, b'{"task": "task3"}')
    print(f"  Enqueued task3 with seq={seq3}")

    # Dequeue messages
    print("\nDequeueing messages...")
    result = await client.queue.dequeue(
        queue_name,
        10,
        DequeueOptions(block_ms=1000),
    )

    print(f"  Received {len(result.messages)} messages")
    for msg in result.messages:
        print(f"    seq={msg.seq}: {msg.payload.decode()}")
    # No ack needed: queues are at-most-once, so dequeue already acknowledged them.


async def main() -> None:
    """Main entry point."""
    # Default to localhost:6379, or use command line argument
    endpoint = sys.argv[1] if len(sys.argv) > 1 else "redis://localhost:6379"

    print(f"Connecting to Flo server at {endpoint}...")

    try:
        async with FloClient(endpoint, namespace="example", debug=False) as client:
            print("Connected!")

            await queue_example(client)

            print("\n=== Done ===")

    except ConnectionRefusedError:
        print(f"Error: Could not connect to {endpoint}")
        print("Make sure the Flo server is running.")
        sys.exit(1)
    except Exception as e:
        print(f"Error: {e}")
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
