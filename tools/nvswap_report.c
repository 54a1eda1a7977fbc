// SPDX-License-Identifier: MIT
/*
 * nvswap-report: what nvswap can do on this machine, in seconds (DeepSpeed's
 * ds_report, for the storage side). Backends and why one is missing; for
 * an NVMe path: filesystem, block device and model, O_DIRECT and its
 * alignment, free space, rotational or NVMe; memlock and pinnable memory;
 * huge pages; the copy loop's SIMD level; CUDA: devices, driver,
 * PCIe link, cuFile and its mode (GDS or compatibility). Each problem ends
 * with its fix. Human-readable, or --json. Exit status 1 when nothing usable
 * is found (no backend, or the path cannot hold swap files).
 *
 *   nvswap-report [--nvme-path DIR] [--json]   (--help says more)
 */
#include "report.h"
#include "tool.h"

#include <nvswap/nvswap.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Problems, each with its fix, collected as the report is built. */
static json_t *problems;

static void problem(const char *what, const char *fix)
{
	json_array_append_new(
		problems, json_pack("{s:s, s:s}", "problem", what, "fix", fix));
}

/* The nearest directory of @dir's that exists (@dir itself, else a
 * parent), into @out: where a missing nvme_path's levels would be made
 * (the library makes them, and removes them when done). */
static void existing_parent(const char *dir, char *out, size_t n)
{
	struct stat st;

	snprintf(out, n, "%s", dir);
	while (stat(out, &st) < 0 && errno == ENOENT) {
		char *slash = strrchr(out, '/');

		if (!slash) { /* a relative name: its parent is "." */
			snprintf(out, n, ".");
			return;
		}
		if (slash == out) {
			out[1] = 0; /* "/" */
			return;
		}
		*slash = 0;
	}
}

/* First line of a small file, trimmed; "" when unreadable. */
static const char *read_line(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");

	buf[0] = 0;
	if (!f)
		return buf;
	if (fgets(buf, (int)n, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
	for (size_t k = strlen(buf); k > 0 && buf[k - 1] == ' '; k--)
		buf[k - 1] = 0;
	return buf;
}

/* What to raise when memory was refused (-ENOMEM or -EPERM), chosen from
 * the limit that refused it: the address space (ulimit -v), else the
 * memlock limit, else memory itself. */
static const char *memory_fix(uint64_t need)
{
	struct rlimit as, ml;

	if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
		return "raise the address-space limit: ulimit -v unlimited (or "
		       "LimitAS= for a systemd service)";
	if (getrlimit(RLIMIT_MEMLOCK, &ml) == 0 &&
	    ml.rlim_cur != RLIM_INFINITY && ml.rlim_cur < need)
		return "raise the memlock limit: ulimit -l unlimited, or a "
		       "memlock line in /etc/security/limits.conf (or "
		       "LimitMEMLOCK= for a systemd service)";
	return "free some memory: none of the limits refused it";
}

/* Why io_uring_setup failed (@ret, and the sentence nvs_aio_create left),
 * and the fix for that cause. */
static const char *uring_fix(int ret)
{
	char buf[32];
	FILE *f;

	/* nvs_aio_create gives -EOPNOTSUPP for any backend that cannot
	 * run; the probe's errno is in its sentence. */
	if (ret == -ENOMEM || strstr(tool_last_error(), nvs_strerror(ENOMEM)))
		return memory_fix(1u << 20);
	if (ret == -ENOSYS)
		return "use a kernel built with io_uring (5.1 or later)";
	f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	if (f && fgets(buf, sizeof(buf), f) && atoi(buf) != 0) {
		fclose(f);
		return "allow io_uring: sysctl kernel.io_uring_disabled=0";
	}
	if (f)
		fclose(f);
	return "run outside the seccomp profile or container policy that "
	       "blocks io_uring_setup (kernel.io_uring_disabled is 0)";
}

static json_t *backends(bool *any)
{
	static const enum nvs_backend list[] = {
		NVS_BACKEND_IO_URING, NVS_BACKEND_LIBAIO, NVS_BACKEND_PSYNC};
	json_t *arr = json_array();

	*any = false;
	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
		struct nvs_aio_opts o;
		struct nvs_aio *h;
		int ret;

		nvs_aio_opts_init(&o);
		o.backend = list[i];
		o.queue_depth = 8;
		ret = nvs_aio_create(&o, &h);
		json_t *b = json_pack("{s:s, s:b}", "name",
				      nvs_backend_name(list[i]), "available",
				      ret == 0);
		if (ret == 0) {
			*any = true;
			nvs_aio_destroy(h);
		} else {
			json_object_set_new(b, "why",
					    json_string(tool_last_error()));
			if (list[i] == NVS_BACKEND_IO_URING)
				problem("io_uring is not available (the fast "
					"path): see its line above",
					uring_fix(ret));
			else if (list[i] == NVS_BACKEND_LIBAIO)
				problem("libaio is not available",
					"raise fs.aio-max-nr (sysctl -w "
					"fs.aio-max-nr=1048576)");
		}
		json_array_append_new(arr, b);
	}
	return arr;
}

/* The backend a handle left to choose (AUTO) gets here, and why: the
 * probe, or NVSWAP_BACKEND (which steers only AUTO). */
static json_t *default_backend(void)
{
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	if (nvs_aio_create(NULL, &h) < 0)
		return json_pack("{s:s}", "error", tool_last_error());
	nvs_aio_get_stats(h, &st);
	nvs_aio_destroy(h);
	return json_pack("{s:s, s:s, s:s}", "name",
			 nvs_backend_name(st.backend), "reason",
			 nvs_backend_reason_name(st.backend_reason), "notes",
			 st.backend_notes);
}

static const char *fs_name(long type)
{
	switch ((unsigned long)type) {
	case 0xEF53:
		return "ext4";
	case 0x58465342:
		return "xfs";
	case 0x9123683E:
		return "btrfs";
	case 0x01021994:
		return "tmpfs";
	case 0x858458f6:
		return "ramfs";
	case 0x6969:
		return "nfs";
	case 0x794c7630:
		return "overlayfs";
	case 0x2fc12fc1:
		return "zfs";
	case 0xF2F52010:
		return "f2fs";
	default:
		return "other";
	}
}

/* The block device behind @st_dev: name, model, rotational, sizes. */
static json_t *device(dev_t dev)
{
	char link[512], target[512], path[1024], buf[256], disk[256] = "";
	json_t *d = json_object();
	ssize_t n;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(dev),
		 minor(dev));
	n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0) {
		json_object_set_new(d, "name", json_null());
		return d; /* tmpfs, overlay...: no block device */
	}
	target[n] = 0;
	const char *name = strrchr(target, '/') + 1;
	json_object_set_new(d, "name", json_string(name));
	/* A partition's disk is its parent directory. */
	snprintf(path, sizeof(path), "%s/partition", link);
	if (access(path, F_OK) == 0) {
		*strrchr(target, '/') = 0;
		snprintf(disk, sizeof(disk), "%s", strrchr(target, '/') + 1);
	} else {
		snprintf(disk, sizeof(disk), "%s", name);
	}
	json_object_set_new(d, "disk", json_string(disk));
	snprintf(path, sizeof(path), "/sys/block/%s/device/model", disk);
	read_line(path, buf, sizeof(buf));
	json_object_set_new(d, "model", json_string(*buf ? buf : "unknown"));
	snprintf(path, sizeof(path), "/sys/block/%s/queue/rotational", disk);
	read_line(path, buf, sizeof(buf));
	json_object_set_new(d, "rotational",
			    *buf ? json_boolean(buf[0] == '1') : json_null());
	json_object_set_new(d, "nvme", json_boolean(!strncmp(disk, "nvme", 4)));
	snprintf(path, sizeof(path), "/sys/block/%s/queue/logical_block_size",
		 disk);
	json_object_set_new(
		d, "logical_block_size",
		json_integer(atoi(read_line(path, buf, sizeof(buf)))));
	snprintf(path, sizeof(path), "/sys/block/%s/queue/physical_block_size",
		 disk);
	json_object_set_new(
		d, "physical_block_size",
		json_integer(atoi(read_line(path, buf, sizeof(buf)))));
	if (json_is_true(json_object_get(d, "rotational")))
		problem("the swap path is on a rotational disk: swapping "
			"will be slow",
			"point nvme_path at an SSD, ideally NVMe");
	return d;
}

/* Can files in @dir be opened O_DIRECT, and with which alignment? */
static json_t *direct_io(const char *dir, bool *writable)
{
	char file[4200];
	json_t *j = json_object();
	int fd;

	snprintf(file, sizeof(file), "%s/.nvswap-report-XXXXXX", dir);
	fd = mkstemp(file);
	*writable = fd >= 0;
	if (fd < 0) {
		char msg[4400];
		int err = errno;
		snprintf(msg, sizeof(msg), "cannot create files in %s: %s", dir,
			 strerror(err));
		json_object_set_new(j, "writable", json_false());
		json_object_set_new(j, "error", json_string(msg));
		problem(msg,
			err == ENOSPC || err == EDQUOT
				? "free space on that filesystem, or choose "
				  "a directory on another one"
			: err == EROFS
				? "choose a directory on a writable filesystem"
				: "choose a directory you can write "
				  "(nvme_path), or fix its permissions");
		return j;
	}
	close(fd);
	/* O_NONBLOCK: the name is in a directory others may write. */
	fd = open(file, O_RDWR | O_DIRECT | O_NONBLOCK | O_CLOEXEC);
	json_object_set_new(j, "writable", json_true());
	json_object_set_new(j, "o_direct", json_boolean(fd >= 0));
	if (fd >= 0) {
		struct nvs_dio_align a;
		if (nvs_dio_alignment(fd, &a) == 0) {
			json_object_set_new(j, "memory_alignment",
					    json_integer(a.mem_align));
			json_object_set_new(j, "offset_alignment",
					    json_integer(a.offset_align));
			json_object_set_new(
				j, "alignment_from",
				json_string(a.from_statx ? "statx"
							 : "block size"));
		}
		close(fd);
	} else {
		problem("this filesystem refuses O_DIRECT: reads and writes "
			"go through the page cache (slower, and they compete "
			"with the model for memory)",
			"use a directory on ext4 or xfs on the NVMe device");
	}
	unlink(file);
	return j;
}

/* Less free space than this and the path cannot hold even one buffer. */
#define MIN_FREE (1u << 20)

static json_t *path_report(const char *dir, bool *usable)
{
	json_t *p = json_pack("{s:s}", "path", dir);
	struct statfs fs;
	struct statvfs vfs;
	struct stat st;
	bool writable;

	char made[4096];

	*usable = false;
	if (stat(dir, &st) < 0 && errno == ENOENT) {
		/* nvswap makes it: judge where it would be made */
		existing_parent(dir, made, sizeof(made));
		json_object_set_new(p, "exists", json_false());
		json_object_set_new(p, "checked", json_string(made));
		dir = made;
	} else {
		json_object_set_new(p, "exists", json_true());
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		char msg[4400];
		snprintf(msg, sizeof(msg), "nvme_path %s: %s", dir,
			 stat(dir, &st) < 0 ? strerror(errno)
					    : "not a directory");
		json_object_set_new(p, "error", json_string(msg));
		problem(msg, "give --nvme-path a directory on the disk to "
			     "swap to (nvswap makes one that does not exist)");
		return p;
	}
	if (statfs(dir, &fs) == 0) {
		const char *name = fs_name((long)fs.f_type);
		char msg[4400];

		json_object_set_new(p, "filesystem", json_string(name));
		if (!strcmp(name, "tmpfs") || !strcmp(name, "ramfs")) {
			snprintf(msg, sizeof(msg),
				 "%s is on %s: swap files there live in "
				 "memory, which offloading is meant to spare",
				 dir, name);
			problem(msg, "choose a directory on the NVMe disk "
				     "(--nvme-path, nvme_path)");
		}
	}
	if (statvfs(dir, &vfs) == 0) {
		uint64_t free_b = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		json_object_set_new(p, "free_bytes",
				    json_integer((json_int_t)free_b));
		json_object_set_new(p, "read_only",
				    json_boolean(vfs.f_flag & ST_RDONLY));
	}
	json_object_set_new(p, "device", device(st.st_dev));
	json_object_set_new(p, "direct_io", direct_io(dir, &writable));
	*usable = writable;
	/* An empty file can still be made on a full filesystem: judge the
	 * space too (f_blocks 0: no size to report, as ramfs). */
	if (writable && statvfs(dir, &vfs) == 0 && vfs.f_blocks &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < MIN_FREE) {
		char msg[4400];
		snprintf(msg, sizeof(msg),
			 "the filesystem of %s is full: %llu bytes free, less "
			 "than one %u MiB swap buffer",
			 dir, (unsigned long long)vfs.f_bavail * vfs.f_frsize,
			 MIN_FREE >> 20);
		json_object_set_new(p, "error", json_string(msg));
		problem(msg, "free space on that filesystem, or choose a "
			     "directory on another one");
		*usable = false;
	}
	return p;
}

static json_t *memory(void)
{
	struct nvs_pinned_stats ps;
	struct rlimit rl;
	char buf[256];
	json_t *m = json_object();
	uint64_t total = 0, free_hp = 0, hp_size = 0, avail = 0, can, probe;
	FILE *f;
	const char *why = NULL;
	void *p;
	int err = 0;

	getrlimit(RLIMIT_MEMLOCK, &rl);
	nvs_pinned_stats(&ps);
	bool unlimited = ps.memlock_limit == UINT64_MAX;
	json_object_set_new(
		m, "memlock_limit",
		unlimited ? json_string("unlimited")
			  : json_integer((json_int_t)ps.memlock_limit));
	if (!unlimited && ps.memlock_limit < (1ull << 30))
		problem("the memlock limit is below 1 GiB: the pinned pool "
			"(buffer_count x buffer_size) cannot be locked",
			"raise it: ulimit -l unlimited, or a memlock line in "
			"/etc/security/limits.conf (or LimitMEMLOCK= for a "
			"systemd service)");
	f = fopen("/proc/meminfo", "r");
	while (f && fgets(buf, sizeof(buf), f)) {
		unsigned long long v;
		if (sscanf(buf, "MemAvailable: %llu kB", &v) == 1)
			avail = v * 1024;
		else if (sscanf(buf, "HugePages_Total: %llu", &v) == 1)
			total = v;
		else if (sscanf(buf, "HugePages_Free: %llu", &v) == 1)
			free_hp = v;
		else if (sscanf(buf, "Hugepagesize: %llu kB", &v) == 1)
			hp_size = v * 1024;
	}
	if (f)
		fclose(f);
	/* How much can be pinned: the limit, or the memory there is; then
	 * lock a probe of up to 64 MiB through the library to be sure. */
	can = ps.memlock_limit < avail ? ps.memlock_limit : avail;
	json_object_set_new(m, "available_bytes",
			    json_integer((json_int_t)avail));
	json_object_set_new(m, "pinnable_bytes", json_integer((json_int_t)can));
	/* Locked memory the arena holds free is reused, so the room left is
	 * the limit less what is in use. */
	probe = can > ps.bytes_in_use ? (can - ps.bytes_in_use) / 2 : 0;
	if (probe > (64u << 20))
		probe = 64u << 20;
	probe &= ~(uint64_t)4095;
	p = probe ? nvs_pinned_alloc(probe, &err) : NULL;
	if (!p)
		why = probe ? tool_last_error()
			    : "no room left under the memlock limit";
	json_object_set_new(m, "pinned_probe",
			    json_pack("{s:I, s:b, s:s?}", "bytes",
				      (json_int_t)probe, "ok", p != NULL,
				      "error", why));
	if (p)
		nvs_pinned_free(p);
	else
		problem("locking a small pinned buffer failed",
			probe ? memory_fix(probe)
			      : "raise the memlock limit (see the pinnable "
				"line)");
	json_object_set_new(m, "huge_pages",
			    json_pack("{s:I, s:I, s:I, s:s}", "total",
				      (json_int_t)total, "free",
				      (json_int_t)free_hp, "size",
				      (json_int_t)hp_size, "transparent",
				      read_line("/sys/kernel/mm/"
						"transparent_hugepage/enabled",
						buf, sizeof(buf))));
	return m;
}

/* The PCIe link of the first NVIDIA display or 3D controller in sysfs
 * (vendor 0x10de, class 0x03xxxx): its maximum, which an idle GPU's
 * current link (nvs_gpu_info) may train down from. 0 when unknown. */
static void pcie_max(int *gen, int *width)
{
	static const double gt[] = {2.5, 5, 8, 16, 32, 64};
	char path[320], buf[64];
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;

	*gen = *width = 0;
	if (!d)
		return;
	while ((e = readdir(d)) && !*width) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor",
			 e->d_name);
		if (strcmp(read_line(path, buf, sizeof(buf)), "0x10de"))
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class",
			 e->d_name);
		if (strncmp(read_line(path, buf, sizeof(buf)), "0x03", 4))
			continue;
		snprintf(path, sizeof(path),
			 "/sys/bus/pci/devices/%s/max_link_width", e->d_name);
		*width = atoi(read_line(path, buf, sizeof(buf)));
		snprintf(path, sizeof(path),
			 "/sys/bus/pci/devices/%s/max_link_speed", e->d_name);
		double speed = atof(read_line(path, buf, sizeof(buf)));
		for (int g = 0; g < 6; g++)
			if (speed > gt[g] * 0.9 && speed < gt[g] * 1.1)
				*gen = g + 1;
	}
	closedir(d);
}

/* The GPU side from nvs_gpu_info(): devices, driver, PCIe link, cuFile
 * and its mode; problems only where a GPU is evidently meant to work
 * (a device node, or NVSWAP_LIBCUDA set). Fills "gpu" and "gds". */
static void gpu(json_t *r)
{
	struct nvs_gpu_info gi;
	int mgen, mwidth;
	bool node = access("/dev/nvidia0", F_OK) == 0 ||
		    access("/proc/driver/nvidia/version", F_OK) == 0;
	const char *env = getenv("NVSWAP_LIBCUDA");

	nvs_gpu_info(&gi);
	pcie_max(&mgen, &mwidth);
	json_object_set_new(
		r, "gpu",
		json_pack("{s:i, s:i, s:s?, s:s?, s:I, s:{s:i, s:i, s:i, "
			  "s:i}, s:s}",
			  "device_count", gi.device_count, "driver_version",
			  gi.driver_version, "driver_lib",
			  gi.driver_lib[0] ? gi.driver_lib : NULL, "device0",
			  gi.device0[0] ? gi.device0 : NULL, "device0_bytes",
			  (json_int_t)gi.device0_bytes, "pcie", "gen",
			  gi.device0_pcie_gen, "width", gi.device0_pcie_width,
			  "max_gen", mgen, "max_width", mwidth, "status",
			  gi.status));
	json_object_set_new(
		r, "gds",
		json_pack("{s:s?, s:b, s:b, s:s?, s:s, s:b}", "cufile",
			  gi.cufile_lib[0] ? gi.cufile_lib : NULL,
			  "cufile_opened", gi.cufile, "nvidia_fs", gi.nvfs,
			  "mode", gi.cufile_mode[0] ? gi.cufile_mode : NULL,
			  "status", gi.cufile_status, "used_by_nvswap",
			  gi.cufile));
	if (gi.device_count == 0) {
		if (node || (env && *env))
			problem(gi.status,
				"install the NVIDIA driver (its libcuda.so.1), "
				"or set NVSWAP_LIBCUDA to the path of "
				"libcuda.so.1; NVSWAP_GPU=off means no GPU");
		return;
	}
	if (!gi.cufile)
		problem("no cuFile: aio handles with use_gds fail (-ENODEV); "
			"device memory is still staged through pinned memory",
			"install CUDA's libcufile (the cuda-cufile or "
			"libcufile package), or set NVSWAP_CUFILE to the path "
			"of libcufile.so.0");
	else if (!gi.nvfs)
		problem("cuFile runs in compatibility mode (no nvidia-fs "
			"kernel module): use_gds works, through host memory",
			"nothing is needed for it to work; for true GPUDirect "
			"Storage install NVIDIA's GDS packages and modprobe "
			"nvidia-fs");
	if ((mgen && mgen < 4) || (mwidth && mwidth < 16))
		problem("the GPU's PCIe link is below gen4 x16: staged copies "
			"will be slower than the disk can go",
			"seat the GPU in a PCIe gen4 (or later) x16 slot, and "
			"check the BIOS link settings");
}

static void usage(FILE *f)
{
	fputs("usage: nvswap-report [--nvme-path DIR] [--json]\n"
	      "\n"
	      "Says in a second whether nvswap will run well on this machine, "
	      "and what to\n"
	      "fix when it will not: the library's version and build; each "
	      "I/O backend\n"
	      "(io_uring, libaio, psync), why one is missing, and the one a "
	      "handle gets;\n"
	      "for DIR: filesystem, block device and model, NVMe or not, "
	      "rotational or not,\n"
	      "O_DIRECT and its alignment, free space; memlock and how much "
	      "memory can be\n"
	      "pinned (a 64 MiB probe); huge pages; the copy loop's SIMD "
	      "level; CUDA, the\n"
	      "GPUs and cuFile (GDS or compatibility mode). Each problem "
	      "ends with its fix.\n"
	      "\n"
	      "  --nvme-path DIR   the directory swap files will go to "
	      "(default: .)\n"
	      "  --json            one JSON object on stdout instead of "
	      "text\n"
	      "  -h, --help        this text\n"
	      "  --version         print the version and exit\n"
	      "\n"
	      "Exit status: 0 nvswap can run here, 1 it cannot (no backend "
	      "works, or DIR\n"
	      "cannot hold swap files), 2 on bad usage.\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"nvme-path", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = ".";
	bool as_json = false, any, path_ok;
	int c;

	tool_name = "nvswap-report";
	while ((c = tool_getopt(argc, argv, "h", lo, 2)) != -1) {
		if (c == 'p') {
			dir = optarg;
		} else if (c == 'j') {
			as_json = true;
		} else if (c == 'V') {
			return tool_version();
		} else {
			usage(stdout);
			return 0;
		}
	}
	if (optind < argc)
		tool_die(2,
			 "unexpected argument '%s' (see nvswap-report --help)",
			 argv[optind]);
	problems = json_array();
	json_t *r = json_object();
	json_object_set_new(r, "version", json_string(nvs_version()));
	json_object_set_new(r, "build_features",
			    json_string(nvs_build_features()));
	json_object_set_new(r, "backends", backends(&any));
	json_object_set_new(r, "default_backend", default_backend());
	if (!any)
		problem("no I/O backend works here",
			"see the backend lines: even pread/pwrite failed");
	json_object_set_new(r, "nvme_path", path_report(dir, &path_ok));
	json_object_set_new(r, "memory", memory());
	json_object_set_new(r, "copy_impl", json_string(nvs_copy_impl()));
	json_object_set_new(r, "cuda", json_string(nvs_pinned_cuda_status()));
	gpu(r);
	json_object_set_new(r, "usable", json_boolean(any && path_ok));
	json_object_set_new(r, "problems", problems);
	if (as_json) {
		char *s = json_dumps(r, JSON_INDENT(2));
		puts(s);
		free(s);
	} else {
		report_print(r);
	}
	bool ok = any && path_ok;
	json_decref(r);
	return ok ? 0 : 1;
}
