/* SPDX-License-Identifier: MIT */
/* What a case run as user nobody reports back (see nobody.c). */
#ifndef NVS_TESTUTIL_CHILD_H
#define NVS_TESTUTIL_CHILD_H

struct tu_child {
	int res[8];
	char msg[1024];
};

#endif
