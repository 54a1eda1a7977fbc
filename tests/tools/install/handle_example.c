// SPDX-License-Identifier: MIT
/*
 * README's "Using the handle", made a whole program: an aio handle with
 * two workers writes 4 MiB of page-locked memory to a file and reads it
 * back with a per-op ticket. tests/tools/install.sh builds it against an
 * installed nvswap with `cc handle_example.c $(pkg-config --cflags --libs
 * nvswap)` alone and checks what it prints.
 *
 *   handle_example FILE
 */
#include <nvswap/nvswap.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	const size_t nbytes = 4 << 20;
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned char *buf, *back;
	uint64_t ticket;
	int n, ret;

	if (argc != 2) {
		fprintf(stderr, "usage: handle_example FILE\n");
		return 2;
	}
	nvs_aio_opts_init(&o); /* DeepNVMe defaults: 1 MiB blocks, depth 128 */
	o.intra_op_parallelism = 2; /* two worker threads, two slices per op */
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	buf = nvs_aio_new_cpu_locked_buffer(h, nbytes);
	back = nvs_aio_new_cpu_locked_buffer(h, nbytes);
	if (!buf || !back) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	for (size_t i = 0; i < nbytes; i++)
		buf[i] = (unsigned char)(i * 7 + i / 4096);

	ret = nvs_aio_async_pwrite(h, buf, nbytes, argv[1], 0); /* 0 = queued */
	n = ret < 0 ? ret : nvs_aio_wait(h); /* ops completed, or -errno */
	if (n < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}

	struct nvs_aio_io io = {NVS_AIO_READ, back, nbytes, argv[1], -1, 0};
	ret = nvs_aio_submit(h, &io, &ticket); /* per-op completion */
	if (ret == 0)
		ret = nvs_aio_wait_op(h, ticket); /* 0 or that op's -errno */
	if (ret < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	printf("nvswap %s: wrote %zu bytes in %d op, read them back: %s\n",
	       nvs_version(), nbytes, n,
	       memcmp(buf, back, nbytes) ? "DIFFERENT" : "equal");
	nvs_aio_free_cpu_locked_buffer(h, buf);
	nvs_aio_free_cpu_locked_buffer(h, back);
	return nvs_aio_destroy(h) < 0 ? 1 : 0; /* finishes anything in flight */
}
