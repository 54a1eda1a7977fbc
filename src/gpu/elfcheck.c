// SPDX-License-Identifier: MIT
/*
 * Before a driver library (libcuda, libcufile) named by a path is handed
 * to dlopen(): a file cut inside its loadable segments makes glibc map
 * pages past the end of the file, and the first touch of them kills the
 * process with SIGBUS inside dlopen(). The ELF header and program headers
 * are read here and every PT_LOAD segment must lie within the file.
 * Anything that is not a 64-bit ELF file is left to dlopen(), which
 * refuses it with a sentence.
 */
#include "gpu/driver.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool read_at(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);

	return r == (ssize_t)n;
}

bool nvs__lib_truncated(const char *path, char *why, size_t len)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	struct stat st;
	bool cut = false;
	int fd;

	if (!path || !strchr(path, '/')) /* found by the loader's search */
		return false;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false; /* dlopen() says why */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    !read_at(fd, &eh, sizeof(eh), 0) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_phentsize != sizeof(ph)) {
		close(fd);
		return false;
	}
	/* Program headers past the end: dlopen() reads those, and says
	 * "cannot read file data". */
	if (eh.e_phoff > (uint64_t)st.st_size ||
	    (uint64_t)eh.e_phnum * sizeof(ph) >
		    (uint64_t)st.st_size - eh.e_phoff) {
		close(fd);
		return false;
	}
	for (unsigned i = 0; i < eh.e_phnum && !cut; i++) {
		if (!read_at(fd, &ph, sizeof(ph),
			     (off_t)(eh.e_phoff + (uint64_t)i * sizeof(ph))))
			break;
		if (ph.p_type == PT_LOAD &&
		    (ph.p_offset > (uint64_t)st.st_size ||
		     ph.p_filesz > (uint64_t)st.st_size - ph.p_offset)) {
			snprintf(why, len,
				 "%s ends at %lld bytes, before the end of "
				 "its loadable segment %u (%llu bytes at "
				 "offset %llu): a truncated file?",
				 path, (long long)st.st_size, i,
				 (unsigned long long)ph.p_filesz,
				 (unsigned long long)ph.p_offset);
			cut = true;
		}
	}
	close(fd);
	return cut;
}
