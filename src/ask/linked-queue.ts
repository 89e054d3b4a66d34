/** A node of a {@link LinkedQueue}; keep it to remove the value in O(1). */
export interface QueueNode<T> {
  readonly value: T;
  prev: QueueNode<T> | undefined;
  next: QueueNode<T> | undefined;
  /** False once the node has left its queue, so a second removal is a no-op. */
  linked: boolean;
}

/**
 * A doubly linked FIFO: push, shift and remove-by-node are all O(1), which an
 * array's `shift()`/`splice()` over a long line of asks is not.
 */
export class LinkedQueue<T> {
  #head: QueueNode<T> | undefined;
  #tail: QueueNode<T> | undefined;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  push(value: T): QueueNode<T> {
    const node: QueueNode<T> = { value, prev: this.#tail, next: undefined, linked: true };
    if (this.#tail === undefined) this.#head = node;
    else this.#tail.next = node;
    this.#tail = node;
    this.#size += 1;
    return node;
  }

  shift(): T | undefined {
    const head = this.#head;
    if (head === undefined) return undefined;
    this.remove(head);
    return head.value;
  }

  remove(node: QueueNode<T>): void {
    if (!node.linked) return;
    node.linked = false;
    if (node.prev === undefined) this.#head = node.next;
    else node.prev.next = node.next;
    if (node.next === undefined) this.#tail = node.prev;
    else node.next.prev = node.prev;
    // Cut the links so a removed node cannot keep its neighbours alive.
    node.prev = undefined;
    node.next = undefined;
    this.#size -= 1;
  }
}
