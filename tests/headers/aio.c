/* Compiles alone: nvswap/aio.h is self-contained. */
#include <nvswap/aio.h>
#include <nvswap/aio.h> /* and include-guarded */

int main(void)
{
	return 0;
}
