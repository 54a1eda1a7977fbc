/* Compiles alone: nvswap/swapper.h is self-contained. */
#include <nvswap/swapper.h>
#include <nvswap/swapper.h> /* and include-guarded */

int main(void)
{
	return 0;
}
