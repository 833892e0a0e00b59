"""Moving batches and large arrays between processes through shared memory."""
