/* Compiles alone: nvswap/buffers.h is self-contained. */
#include <nvswap/buffers.h>
#include <nvswap/buffers.h> /* and include-guarded */

int main(void)
{
	return 0;
}
