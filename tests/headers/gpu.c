/* Compiles alone: nvswap/gpu.h is self-contained. */
#include <nvswap/gpu.h>
#include <nvswap/gpu.h> /* and include-guarded */

int main(void)
{
	return 0;
}
