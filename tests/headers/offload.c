/* Compiles alone: nvswap/offload.h is self-contained. */
#include <nvswap/offload.h>
#include <nvswap/offload.h> /* and include-guarded */

int main(void)
{
	return 0;
}
