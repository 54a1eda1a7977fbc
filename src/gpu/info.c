// SPDX-License-Identifier: MIT
/* nvs_gpu_info(): what nvswap-report prints about the GPU side. */
#include "gpu/driver.h"
#include "gpu/gds.h"
#include "internal/errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CUdevice_attribute values. */
#define ATTR_PCI_BUS_ID 33
#define ATTR_PCI_DEVICE_ID 34
#define ATTR_PCI_DOMAIN_ID 50

/* The first number in sysfs file @path, or -1. */
static double read_number(const char *path)
{
	FILE *f = fopen(path, "re");
	double v;
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "%lf", &v);
	fclose(f);
	return n == 1 ? v : -1;
}

/* The PCIe link of device 0, from sysfs (the driver API has no call). */
static void pcie_link(int dev, struct nvs_gpu_info *info)
{
	int bus = 0, slot = 0, dom = 0;
	double speed, width;
	char path[160];

	if (nvs__cu.DeviceGetAttribute(&bus, ATTR_PCI_BUS_ID, dev) ||
	    nvs__cu.DeviceGetAttribute(&slot, ATTR_PCI_DEVICE_ID, dev) ||
	    nvs__cu.DeviceGetAttribute(&dom, ATTR_PCI_DOMAIN_ID, dev))
		return;
	snprintf(path, sizeof(path),
		 "/sys/bus/pci/devices/%04x:%02x:%02x.0/current_link_width",
		 dom, bus, slot);
	width = read_number(path);
	if (width > 0)
		info->device0_pcie_width = (int)width;
	snprintf(path, sizeof(path),
		 "/sys/bus/pci/devices/%04x:%02x:%02x.0/current_link_speed",
		 dom, bus, slot);
	/* "32.0 GT/s PCIe": 2.5, 5, 8, 16, 32, 64 GT/s are gens 1 to 6. */
	speed = read_number(path);
	if (speed > 0) {
		static const double gt[] = {2.5, 5, 8, 16, 32, 64};
		for (int g = 0; g < 6; g++)
			if (speed > gt[g] * 0.9 && speed < gt[g] * 1.1)
				info->device0_pcie_gen = g + 1;
	}
}

int nvs_gpu_info(struct nvs_gpu_info *info)
{
	int dev;

	if (!info)
		return nvs__err(-EINVAL, "nvs_gpu_info: info is NULL");
	memset(info, 0, sizeof(*info));
	if (nvs__gpu_load("nvswap") < 0) {
		snprintf(info->status, sizeof(info->status), "%s",
			 nvs__gpu_status());
		snprintf(info->cufile_status, sizeof(info->cufile_status),
			 "not tried: no CUDA driver");
		return 0;
	}
	info->device_count = nvs__gpu_count();
	nvs__cu.DriverGetVersion(&info->driver_version);
	snprintf(info->driver_lib, sizeof(info->driver_lib), "%s",
		 getenv("NVSWAP_LIBCUDA") && *getenv("NVSWAP_LIBCUDA")
			 ? getenv("NVSWAP_LIBCUDA")
			 : "libcuda.so.1");
	if (nvs__cu.DeviceGet(&dev, 0) == 0) {
		size_t total = 0;
		nvs__cu.DeviceGetName(info->device0, sizeof(info->device0),
				      dev);
		if (nvs__cu.DeviceTotalMem(&total, dev) == 0)
			info->device0_bytes = total;
		pcie_link(dev, info);
	}
	snprintf(info->status, sizeof(info->status),
		 "%d CUDA device%s; device memory is staged through pinned "
		 "bounce buffers",
		 info->device_count, info->device_count == 1 ? "" : "s");
	nvs__gds_describe(&info->cufile, &info->nvfs, info->cufile_lib,
			  sizeof(info->cufile_lib), info->cufile_mode,
			  sizeof(info->cufile_mode), info->cufile_status,
			  sizeof(info->cufile_status));
	return 0;
}
