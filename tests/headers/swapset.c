/* Compiles alone: nvswap/swapset.h is self-contained. */
#include <nvswap/swapset.h>
#include <nvswap/swapset.h> /* and include-guarded */

int main(void)
{
	return 0;
}
